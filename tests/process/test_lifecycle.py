"""Signals end a run gracefully and keep its results; no child outlives `tpot-locust run`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.skipif(os.name != "posix", reason="POSIX signals and process groups")


def _children(pid: int) -> list[int]:
    """Every descendant of ``pid`` (Linux: /proc/<pid>/task/*/children)."""
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            children = [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue
        for child in children:
            found += [child, *_children(child)]
    return found


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split(") ")[1].startswith("Z"))


def _start(out: Path, workers: int) -> subprocess.Popen[str]:
    command = [
        sys.executable,
        "-m",
        "tpot_locust",
        "run",
        "scenarios/quickstart.yaml",
        "--run-time",
        "40s",
        "--workers",
        str(workers),
        "--out",
        str(out),
    ]
    # its own session: a signal to "the group" reaches it as a terminal's Ctrl-C would
    return subprocess.Popen(
        command,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        env=dict(os.environ, PYTHONUNBUFFERED="1"),
    )


def _wait_for_traffic(process: subprocess.Popen[str], out: Path) -> list[int]:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        truth = out / "truth.jsonl"
        if truth.exists() and truth.stat().st_size > 0:
            time.sleep(2)
            return _children(process.pid)
        time.sleep(0.2)
    process.kill()
    raise AssertionError(process.communicate()[0])


def _aborted_at_server(out: Path) -> int:
    lines = (out / "truth.jsonl").read_text().splitlines()
    return sum(1 for line in lines if json.loads(line).get("aborted"))


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("how", ["sigterm-to-parent", "sigint-to-group"])
def test_a_signal_stops_the_run_and_keeps_its_results(
    tmp_path: Path, workers: int, how: str
) -> None:
    out = tmp_path / "out"
    process = _start(out, workers)
    children = _wait_for_traffic(process, out)
    assert len(children) >= 2 + workers  # simulator, Locust, its workers
    if how == "sigterm-to-parent":
        process.send_signal(signal.SIGTERM)
        expected = 128 + signal.SIGTERM
    else:
        os.killpg(process.pid, signal.SIGINT)  # Ctrl-C in the terminal
        expected = 128 + signal.SIGINT
    output, _ = process.communicate(timeout=60)
    assert process.returncode == expected, output[-3000:]
    assert "Traceback" not in output, output[-3000:]
    assert "=== tpot-locust: " in output  # the report's first screen, after the signal
    assert "=== tpot-locust report" in (out / "report.txt").read_text()  # and every table
    summary = json.loads((out / "summary.json").read_text())
    assert summary["complete"] is True
    assert summary["requests"]["ok"] > 0
    assert summary["requests"]["errors"] == {}  # the simulator stopped after the users
    assert summary["requests"]["interrupted"] == _aborted_at_server(out)
    time.sleep(0.5)
    assert not [pid for pid in children if _alive(pid)]


def test_a_second_signal_stops_sooner_and_still_writes(tmp_path: Path) -> None:
    out = tmp_path / "out"
    process = _start(out, workers=2)
    children = _wait_for_traffic(process, out)
    process.send_signal(signal.SIGTERM)
    time.sleep(0.1)
    process.send_signal(signal.SIGTERM)
    output, _ = process.communicate(timeout=60)
    assert process.returncode == 128 + signal.SIGTERM, output[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["requests"]["ok"] > 0  # what the workers reported before they were killed
    time.sleep(0.5)
    assert not [pid for pid in children if _alive(pid)]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_no_child_outlives_a_killed_parent(tmp_path: Path) -> None:
    out = tmp_path / "out"
    process = _start(out, workers=2)
    children = _wait_for_traffic(process, out)
    process.kill()
    process.communicate(timeout=30)
    deadline = time.monotonic() + 20
    while [pid for pid in children if _alive(pid)] and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not [pid for pid in children if _alive(pid)]
