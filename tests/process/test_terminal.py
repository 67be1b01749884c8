"""Every way a person starts a run works in an interactive terminal: it ends, one Ctrl-C
stops it with its results written, a second ends a long drain at once, and the end of a run
fits one screen of 30 x 100.

Each command runs in a real pseudo-terminal, as the session's foreground job (or, for ``&``,
as an interactive shell's background job): a child that touched the terminal from a
background process group was stopped by the kernel, which no test with its output in a pipe
could see.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.helpers.terminal import CTRL_C, Terminal, display_width

pytestmark = pytest.mark.skipif(os.name != "posix", reason="POSIX pseudo-terminals")

SCREEN_ROWS, SCREEN_COLS = 30, 100
END_OF_RUN = "=== tpot-locust"  # the first line of our end-of-run screen
FIRST_PROGRESS = "[     1s /"  # the progress line one second in: traffic flows


def _run(*args: str) -> list[str]:
    return [sys.executable, "-m", "tpot_locust", "run", *args]


def _assert_fits_one_screen(terminal: Terminal) -> None:
    rows = terminal.screen_rows(END_OF_RUN)
    assert len(rows) <= SCREEN_ROWS, "\n".join(rows)
    progress = [line for line in terminal.text.splitlines() if line.startswith("[ ")]
    assert progress, terminal.text[-3000:]
    assert max(display_width(line) for line in progress) <= SCREEN_COLS, progress[-1]
    assert "Response time percentiles" not in terminal.text  # Locust's own tables: not shown


def _summary(out: Path) -> dict:
    return json.loads((out / "summary.json").read_text())


@pytest.mark.parametrize("workers", [0, 2])
def test_the_first_command_ends_and_fits_one_screen(tmp_path: Path, workers: int) -> None:
    out = tmp_path / "out"
    terminal = Terminal(
        _run("scenarios/quickstart.yaml", "--run-time", "5s", "--workers", str(workers))
        + ["--out", str(out)],
        cwd=ROOT,
    )
    assert terminal.wait(120) == 0, terminal.text[-3000:]
    _assert_fits_one_screen(terminal)
    assert _summary(out)["requests"]["ok"] > 0


def test_a_gated_run_fits_one_screen(tmp_path: Path) -> None:
    out = tmp_path / "out"
    args = ["--run-time", "6s", "--set", "warmup=1s", "--out", str(out)]
    terminal = Terminal(_run("scenarios/release-gate.yaml", *args), cwd=ROOT)
    # 1: too short for its TTFT P99 (insufficient); 3: a machine held by its host
    assert terminal.wait(120) in (0, 1, 3), terminal.text[-3000:]
    assert "=== SLO verdict" in terminal.text
    _assert_fits_one_screen(terminal)
    assert (out / "junit.xml").exists()


@pytest.mark.parametrize("workers", [0, 2])
def test_one_ctrl_c_stops_the_run_and_keeps_its_results(tmp_path: Path, workers: int) -> None:
    out = tmp_path / "out"
    terminal = Terminal(
        _run("scenarios/quickstart.yaml", "--run-time", "60s", "--workers", str(workers))
        + ["--out", str(out)],
        cwd=ROOT,
    )
    assert terminal.read_until(FIRST_PROGRESS, 90), terminal.text[-3000:]
    terminal.type(CTRL_C)
    assert terminal.wait(45) == 130, terminal.text[-3000:]
    assert END_OF_RUN in terminal.text
    summary = _summary(out)
    assert summary["complete"] is True
    assert summary["requests"]["ok"] > 0


def test_a_second_ctrl_c_ends_a_long_drain_at_once(tmp_path: Path) -> None:
    """Answers of ~40 s and a 60 s stop timeout: the first Ctrl-C waits for them, the
    second stops the users now; their requests count as interrupted, the results written."""
    out = tmp_path / "out"
    long_answers = ["--set", "classes.chat.output_tokens=20000", "--set", "stop_timeout=60"]
    terminal = Terminal(
        _run("scenarios/quickstart.yaml", "--run-time", "60s", "--workers", "2", *long_answers)
        + ["--out", str(out)],
        cwd=ROOT,
    )
    assert terminal.read_until(FIRST_PROGRESS, 90), terminal.text[-3000:]
    terminal.type(CTRL_C)
    assert terminal.read_until("signal again", 10), terminal.text[-3000:]
    time.sleep(0.5)
    stopped = time.monotonic()
    terminal.type(CTRL_C)
    assert terminal.wait(30) == 130, terminal.text[-3000:]
    assert time.monotonic() - stopped < 20, terminal.text[-3000:]
    requests = _summary(out)["requests"]
    assert requests["interrupted"] == 8, requests  # every user's answer was in flight


def test_a_background_job_of_an_interactive_shell_ends(tmp_path: Path) -> None:
    """``tpot-locust run ... &`` in a shell with job control: its process group is not the
    terminal's foreground one, where a child that set the terminal's modes was stopped."""
    out = tmp_path / "out"
    command = " ".join(_run("scenarios/quickstart.yaml", "--run-time", "4s", "--out", str(out)))
    shell = ["bash", "--norc", "--noprofile", "-i", "-c", f"{command} & wait $!; exit $?"]
    terminal = Terminal(shell, cwd=ROOT, env=dict(os.environ, PS1="$ "))
    assert terminal.wait(120) == 0, terminal.text[-3000:]
    assert _summary(out)["requests"]["ok"] > 0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _post(url: str, form: dict[str, str | int]) -> dict:
    data = "&".join(f"{key}={value}" for key, value in form.items()).encode()
    with urllib.request.urlopen(url, data, timeout=10) as response:
        return json.loads(response.read() or b"{}")


def test_the_web_ui_in_one_command(tmp_path: Path) -> None:
    """``run --web``: the UI on 127.0.0.1 with the scenario's classes and the embedded
    simulator; each test started from the form writes its folder and prints its report;
    one Ctrl-C ends the session."""
    out, port = tmp_path / "out", _free_port()
    terminal = Terminal(
        _run("scenarios/quickstart.yaml", "--web", "--web-port", str(port), "--out", str(out)),
        cwd=ROOT,
    )
    assert terminal.read_until(f"http://127.0.0.1:{port}", 60), terminal.text[-3000:]
    ui = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while not _listening(port) and time.monotonic() < deadline:
        time.sleep(0.2)
    for test in (1, 2):
        assert _post(f"{ui}/swarm", {"user_count": 4, "spawn_rate": 4})["success"] is True
        time.sleep(3)
        _post(f"{ui}/stop", {})
        folder = out if test == 1 else out / "test-2"
        assert terminal.read_until(f"{folder}/report.html", 60), terminal.text[-3000:]
        assert _summary(folder)["requests"]["ok"] > 0
    terminal.type(CTRL_C)
    assert terminal.wait(45) == 130, terminal.text[-3000:]


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True


def test_plain_locust_in_a_terminal_stops_on_one_ctrl_c(tmp_path: Path) -> None:
    port = _free_port()
    simulator = subprocess.Popen(
        [sys.executable, "-m", "tpot_locust", "sim", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while not _listening(port) and time.monotonic() < deadline:
            time.sleep(0.2)
        out = tmp_path / "out"
        locust = [sys.executable, "-m", "locust", "-f", "locustfiles/chat.py"]
        options = ["--headless", "-u", "2", "-r", "2", "-t", "60s", "--tpot-out", str(out)]
        terminal = Terminal(
            [*locust, "--host", f"http://127.0.0.1:{port}", *options],
            cwd=ROOT,
            env=dict(os.environ, PYTHONUNBUFFERED="1"),
        )
        assert terminal.read_until("All users spawned", 60), terminal.text[-3000:]
        time.sleep(3)
        terminal.type(CTRL_C)
        terminal.wait(45)
        assert END_OF_RUN in terminal.text, terminal.text[-3000:]
        assert _summary(out)["requests"]["ok"] > 0
    finally:
        simulator.terminate()
        simulator.wait(10)


def test_two_quick_ctrl_cs_at_the_start_end_the_run_at_once(tmp_path: Path) -> None:
    """Ctrl-C twice before Locust is up (the stop-now signal reaches children that have no
    handler yet: they ignore it until theirs is in): the run ends at once, without a
    traceback."""
    out = tmp_path / "out"
    terminal = Terminal(
        _run("scenarios/quickstart.yaml", "--run-time", "60s", "--workers", "2")
        + ["--out", str(out)],
        cwd=ROOT,
    )
    assert terminal.read_until("tpot-locust: quickstart:", 60), terminal.text[-3000:]
    terminal.type(CTRL_C)
    time.sleep(0.3)
    terminal.type(CTRL_C)
    assert terminal.wait(60) == 130, terminal.text[-3000:]
    assert "Traceback" not in terminal.text, terminal.text[-3000:]
    assert "User defined signal" not in terminal.text, terminal.text[-3000:]


def test_a_sweep_and_the_simulator_in_a_terminal(tmp_path: Path) -> None:
    """``sweep`` (each step a supervised run) ends in a terminal; ``sim`` stops on one
    Ctrl-C."""
    out = tmp_path / "sweep"
    sweep = [sys.executable, "-m", "tpot_locust", "sweep", "scenarios/sweep.yaml"]
    short = ["--max-steps", "1", "--set", "sweep.step_duration=4s", "--set", "sweep.warmup=1s"]
    terminal = Terminal([*sweep, *short, "--out", str(out)], cwd=ROOT)
    # a 4 s step may be too short for its gate (insufficient: exit 1): ending is the point
    assert terminal.wait(120) in (0, 1, 3), terminal.text[-3000:]
    assert "Sweep of chat.users" in terminal.text, terminal.text[-3000:]
    port = _free_port()
    simulator = Terminal([sys.executable, "-m", "tpot_locust", "sim", "--port", str(port)])
    assert simulator.read_until("listening", 60), simulator.text[-3000:]
    simulator.type(CTRL_C)
    assert simulator.wait(30) in (0, 130), simulator.text[-3000:]
