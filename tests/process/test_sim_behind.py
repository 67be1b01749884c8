"""A run whose embedded simulator could not keep its timing model says so (``! simulator
behind``, ``truth_check.schedule.behind``), and its figures stay true: the simulator is held
(SIGSTOP) 15 ms of every 25 through a quickstart run, as a machine with no core to spare for
it would."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from tests.conftest import ROOT


def simulator_pid(marker: str, deadline_s: float = 20.0) -> int:
    """The pid of the simulator whose command line holds ``marker`` (its truth file's path)."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
            try:
                parts = cmdline.read_bytes().split(b"\0")
            except OSError:
                continue
            if b"tpot_locust.sim" in parts and any(marker.encode() in p for p in parts):
                return int(cmdline.parent.name)
        time.sleep(0.05)
    raise AssertionError("the run's simulator did not start")


def hold_until(pid: int, done: threading.Event) -> None:
    """Hold the process 15 ms of every 25 until ``done``; leave it running."""
    try:
        while not done.is_set():
            os.kill(pid, signal.SIGSTOP)
            time.sleep(0.015)
            os.kill(pid, signal.SIGCONT)
            time.sleep(0.010)
    except ProcessLookupError:
        return
    finally:
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass


def test_a_simulator_held_from_its_schedule_is_called_behind(tmp_path: Path) -> None:
    out = tmp_path / "held"
    command = [sys.executable, "-m", "tpot_locust", "run", "scenarios/quickstart.yaml"]
    command += ["--run-time", "6s", "--out", str(out)]
    run = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    done = threading.Event()
    try:
        pid = simulator_pid(str(out / "truth.jsonl"))
        time.sleep(1.0)  # its users started
        holder = threading.Thread(target=hold_until, args=(pid, done))
        holder.start()
        output = run.communicate(timeout=120)[0].decode()
    finally:
        done.set()
        if run.poll() is None:
            run.kill()
            run.wait()
    holder.join(5)
    assert run.returncode == 0, output[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    schedule = summary["truth_check"]["schedule"]
    # held 15 ms of 25: over a third of its events were due while it was held
    assert schedule["behind"] is True and schedule["late_share"] > 0.3, schedule
    assert schedule["late_max_ms"] >= 10, schedule
    assert "! simulator behind:" in output
    assert "! simulator behind:" in (out / "report.txt").read_text()
    assert "! simulator behind:" in (out / "report.html").read_text()
    # and what the client measured is still what the simulator sent
    assert summary["truth_check"]["worst_error_ms"] < 0.5, summary["truth_check"]
    assert summary["truth_check"]["coverage"]["agrees"] is True
