"""``tpot-locust run`` given hostile names and runs that measure nothing (issue 25, item 3).

A scenario's name reached Locust's command line as an option: ``name: "--version"`` made
Locust print its version and exit 0, and the gate passed having measured nothing.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT, run_command

SCENARIO = """\
name: {name}
duration: 2s
classes:
  chat:
    users: 2
    prompt_tokens: 8
    output_tokens: 8
simulator: {{ttft_ms: 5, gap_ms: 1}}
slo:
  tpot: {{p50: 1s}}
  client_stalls: decisive  # a busy test machine does not turn 1 s into a fail
"""


def run(tmp_path: Path, name: str, *extra: str) -> tuple[int, str, Path]:
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text(SCENARIO.format(name=json.dumps(name)))
    out = tmp_path / "out"
    result = run_command(
        [sys.executable, "-m", "tpot_locust", "run", str(scenario), "--out", str(out), *extra],
        timeout=120,
    )
    return result.returncode, result.stdout + result.stderr, out


@pytest.mark.parametrize("name", ["--version", "--help", "-h"])
def test_a_name_that_looks_like_an_option_is_a_name(tmp_path: Path, name: str) -> None:
    code, output, out = run(tmp_path, name)
    assert code == 0, output[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["run"]["scenario"] == name and summary["requests"]["ok"] > 0
    assert json.loads((out / "verdict.json").read_text())["verdict"] == "pass"
    # the saved results, truth check included, read back as they were written
    for view in (["report", str(out)], ["report", str(out), "--html", "--output", str(out)]):
        result = run_command([sys.executable, "-m", "tpot_locust", *view], timeout=60)
        assert result.returncode == 0, result.stdout + result.stderr


def test_a_run_that_measured_nothing_exits_3_whatever_locust_said(tmp_path: Path) -> None:
    code, output, out = run(tmp_path, "nothing", "--", "--users=0")  # Locust runs no user
    assert code == 3, output[-3000:]  # noqa: PLR2004
    assert "nothing was measured" in output
    verdict = json.loads((out / "verdict.json").read_text())
    assert verdict["verdict"] == "invalid" and verdict["exit_code"] == 3  # noqa: PLR2004


LEAF = """\
import signal, sys, time
from tpot_locust.harness.watch.orphan_watch import watch_parent
signal.signal(signal.SIGTERM, signal.SIG_IGN)  # as a process whose loop is wedged
watch_parent(grace_s=0.5)
print("ready", flush=True)
time.sleep(600)
"""
MIDDLE = """\
import subprocess, sys
leaf = subprocess.Popen([sys.executable, "-c", sys.argv[1]], stdout=subprocess.PIPE, text=True)
leaf.stdout.readline()
print(leaf.pid, flush=True)
leaf.wait()
"""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"  # a zombie has exited: only its reaper is missing


def test_a_child_that_ignores_sigterm_does_not_outlive_its_parent() -> None:
    middle = subprocess.Popen(
        [sys.executable, "-c", MIDDLE, LEAF], stdout=subprocess.PIPE, text=True, cwd=ROOT
    )
    assert middle.stdout is not None
    leaf = int(middle.stdout.readline())
    assert _alive(leaf)
    middle.kill()  # as SIGKILL of tpot-locust: no chance to stop its children
    middle.wait()
    deadline = time.monotonic() + 15
    while _alive(leaf):
        assert time.monotonic() < deadline, "the orphan is still running"
        time.sleep(0.2)


@pytest.mark.parametrize("name", ["../../escaped", "a/b/c", "\u202eevil"])
def test_the_default_results_folder_is_one_safe_folder_in_results(
    tmp_path: Path, name: str
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    scenario = work / "scenario.yaml"
    scenario.write_text(SCENARIO.format(name=json.dumps(name)))
    result = run_command(
        [sys.executable, "-m", "tpot_locust", "run", str(scenario)], timeout=120, cwd=work
    )
    assert result.returncode in (0, 2), result.stdout + result.stderr  # 2: a refused name
    if result.returncode == 0:
        (folder,) = (work / "results").iterdir()
        assert (folder / "summary.json").exists() and "/" not in folder.name
    assert sorted(p.name for p in tmp_path.iterdir()) == ["work"]  # nothing escaped


@pytest.mark.parametrize(
    "args",
    [
        ["run", "scenarios/quickstart.yaml", "--workers", "99999999999"],
        ["run", "scenarios/quickstart.yaml", "--workers", "-1"],
        ["run", "scenarios/quickstart.yaml", "--truth-tolerance-ms", "nan"],
        ["run", "scenarios/quickstart.yaml", "--spawn-rate", "inf"],
        ["sweep", "scenarios/sweep.yaml", "--max-steps", "0"],
        ["sim", "--port", "99999"],
        ["sim", "--stall-prob", "nan"],
    ],
)
def test_numeric_options_are_checked_before_anything_starts(args: list[str]) -> None:
    result = run_command([sys.executable, "-m", "tpot_locust", *args], timeout=60)
    assert result.returncode == 2, result.stderr  # noqa: PLR2004
    assert "must be a" in result.stderr and "Traceback" not in result.stderr
    assert "embedded simulator" not in result.stdout  # refused before the simulator started


@pytest.mark.parametrize("tokenizer", ["/nonexistent", "/dev/zero", "/tmp"])
def test_sim_with_a_bad_tokenizer_is_one_line_and_exit_2(tokenizer: str) -> None:
    """Issue 43, item 7: a ``TokenizerError`` traceback, exit 1."""
    result = run_command(
        [sys.executable, "-m", "tpot_locust", "sim", "--tokenizer", tokenizer], timeout=30
    )
    assert result.returncode == 2, result.stderr  # noqa: PLR2004
    assert "Traceback" not in result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert f"tokenizer {tokenizer}" in line


def test_the_simulator_out_of_file_descriptors_says_so_in_few_lines() -> None:
    """Issue 43, item 8: a burst of 100,000 left 1,024 ``Too many open files`` tracebacks."""
    import resource
    import socket

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (40, 40))

    sim = subprocess.Popen(
        [sys.executable, "-m", "tpot_locust", "sim", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=limit,
    )
    try:
        assert sim.stdout is not None
        port = int(sim.stdout.readline().strip().rsplit(":", 1)[1].strip("/"))
        sockets = [socket.create_connection(("127.0.0.1", port)) for _ in range(100)]
        time.sleep(2.5)
    finally:
        sim.terminate()
        _, stderr = sim.communicate(timeout=20)
    for sock in sockets:
        sock.close()
    assert "Traceback" not in stderr, stderr[:2000]
    lines = stderr.strip().splitlines()
    assert 1 <= len(lines) <= 10 and "Too many open files" in stderr, lines  # noqa: PLR2004
