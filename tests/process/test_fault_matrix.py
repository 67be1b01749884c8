"""Any process of a run dies (issue 57's fault matrix): the run ends in bounded time, its
exit code and report say what happened, no process is left, and what reached a surviving
process is counted once.

Each case is a real ``tpot-locust run`` of the quickstart against the embedded simulator
with two local workers (12 s), one of its processes killed 5 s in:

- a **worker**: the master counts what it delivered and says it never sent its final
  report (exit 1, ``INCOMPLETE RUN``); never more gaps than the truth sent;
- the **simulator**: every request from then on fails (``connection_error``, its reason
  named) and the results are written (exit 1, Locust's for failed requests); the truth it
  had not flushed died with it, so no count is held to it;
- the **supervisor** (``tpot-locust`` itself): its children die with it (SIGTERM from the
  kernel, ``PR_SET_PDEATHSIG``), the master saves what it merged on its way out, and
  ``tpot-locust report`` makes the folder's report from what was saved.

- the **master** as it spawns or drains (its steady state: ``test_master_death.py``);
- a **local run's** Locust process: rebuilt from its ``checkpoint.json``;
- the **master stopped** (SIGSTOP) for 30 s: nothing lost, the report says it was held.

A full disk: ``test_full_disk`` below.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.conftest import ROOT, run_command
from tests.helpers.distributed import window_truth_gaps
from tests.helpers.why_runs import truth_lines
from tpot_locust.common.child_process import child_options

KILL_AFTER_S = 5.0
RUN_S = 12


def _start(
    out: Path, log: Path, *extra: str, workers: int = 2, run_s: int = RUN_S
) -> subprocess.Popen[bytes]:
    args = ["run", "scenarios/quickstart.yaml", "--run-time", f"{run_s}s"]
    args += ["--workers", str(workers)] if workers else []
    with log.open("w") as output:  # the child holds its own copy
        return subprocess.Popen(
            [sys.executable, "-m", "tpot_locust", *args, "--out", str(out), *extra],
            cwd=ROOT,
            stdout=output,
            stderr=subprocess.STDOUT,
            **child_options(),
        )


def _role(supervisor: psutil.Process, role: str) -> psutil.Process:
    """The first child whose command line has the argument ``role`` (--worker,
    tpot_locust.sim)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for child in supervisor.children(recursive=True):
            try:
                if role in child.cmdline():  # a whole argument: --master is not --master-host
                    return child
            except psutil.NoSuchProcess:
                continue
        time.sleep(0.2)
    raise AssertionError(f"no {role} process started")


def _when_said(log: Path, words: str, within_s: float = 60) -> None:
    """Back once the run's output holds ``words`` (Locust's log line of a phase)."""
    deadline = time.monotonic() + within_s
    while words not in log.read_text(errors="replace"):
        assert time.monotonic() < deadline, f"never said {words!r}: {log.read_text()[-3000:]}"
        time.sleep(0.05)


def _kill_and_wait(run: subprocess.Popen[bytes], victim: psutil.Process) -> tuple[int, int, float]:
    """SIGKILL ``victim``; the wall time of the kill, the run's exit code and the seconds it
    took to end after it."""
    kill_wall_ns = time.time_ns()
    victim.send_signal(signal.SIGKILL)
    killed = time.monotonic()
    code = run.wait(timeout=60)
    return kill_wall_ns, code, time.monotonic() - killed


def _assert_each_file_whole(out: Path) -> None:
    """Every JSON results file reads whole: written via a rename, or not at all."""
    for saved in [*out.glob("*.json"), *out.glob("workers/*.json")]:
        json.loads(saved.read_text())


def _left_running(out: Path) -> list[str]:
    left = []
    for process in psutil.process_iter(["cmdline"]):
        line = " ".join(process.info["cmdline"] or [])
        if str(out) in line:
            left.append(line[:200])
    return left


@pytest.mark.parametrize("role", ["--worker", "tpot_locust.sim"])
def test_a_killed_worker_or_simulator_ends_the_run_in_bounded_time_and_says_so(
    tmp_path: Path, role: str
) -> None:
    out, log = tmp_path / "out", tmp_path / "run.log"
    run = _start(out, log)
    try:
        victim = _role(psutil.Process(run.pid), role)
        time.sleep(KILL_AFTER_S)
        victim.send_signal(signal.SIGKILL)
        code = run.wait(timeout=RUN_S + 60)
    finally:
        if run.poll() is None:
            run.kill()
    said = log.read_text()
    assert "Traceback" not in said, said[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    truth = truth_lines(out)
    window = summary["run"]["window_wall_ns"]
    if role == "--worker":
        assert code == 1, said[-3000:]
        assert summary["complete"] is False and len(summary["workers"]["missing"]) == 1
        assert "INCOMPLETE RUN: no final report from worker(s)" in said
        # what the dead worker delivered and all the other's: never a gap twice
        assert 0 < summary["metrics"]["itl"]["count"] <= window_truth_gaps(truth, window)
    else:  # Locust's code for failed requests; the report names why
        assert code == 1, said[-3000:]
        requests = summary["requests"]
        assert requests["ok"] > 0 and requests["errors"].get("connection_error", 0) > 0
        assert "connection_error: connect to 127.0.0.1" in said and "Connection refused" in said
        # its truth.jsonl lost its last buffered lines with it: no count to hold ours to
        assert summary["metrics"]["itl"]["count"] > 0
    assert not _left_running(out)


SPAWN, DRAIN = "Sending spawn jobs", "--run-time limit reached"  # Locust's lines of each


@pytest.mark.parametrize(
    "phase", [pytest.param(SPAWN, id="spawn"), pytest.param(DRAIN, id="drain")]
)
@pytest.mark.parametrize("role", ["--worker", "tpot_locust.sim", "supervisor"])
def test_any_process_killed_while_spawning_or_draining(
    tmp_path: Path, role: str, phase: str
) -> None:
    """The rest of the matrix, what must hold whatever the kill catches: the run (or, with
    the supervisor killed, ``report``) ends in bounded time without a traceback, no process
    is left, every results file reads whole, and no gap is counted that the truth did not
    send; a worker that sent no final report is named."""
    out, log = tmp_path / "out", tmp_path / "run.log"
    run = _start(out, log, run_s=6)  # CI's time: the phases come early and late anyway
    try:
        supervisor = psutil.Process(run.pid)
        victim = supervisor if role == "supervisor" else _role(supervisor, role)
        _role(supervisor, "--master")
        _when_said(log, phase)
        victim.send_signal(signal.SIGKILL)
        code = run.wait(timeout=RUN_S + 60)
    finally:
        if run.poll() is None:
            run.kill()
    deadline = time.monotonic() + 30
    while _left_running(out) and time.monotonic() < deadline:  # the supervisor's children
        time.sleep(0.5)
    assert not _left_running(out), _left_running(out)
    said = log.read_text()
    assert "Traceback" not in said, said[-3000:]
    _assert_each_file_whole(out)
    if role == "supervisor":  # its Locust processes saved what they had; report reads it
        made = run_command([sys.executable, "-m", "tpot_locust", "report", str(out), "--json"], 60)
        assert made.returncode == 0, made.stderr[-2000:]
        summary = json.loads(made.stdout)
    elif (out / "summary.json").exists():
        assert code in (0, 1, 3), said[-3000:]
        summary = json.loads((out / "summary.json").read_text())
    else:
        assert "nothing was measured" in said and code == 3, said[-3000:]
        return
    if missing := (summary.get("workers") or {}).get("missing"):
        assert "INCOMPLETE RUN: no final report from worker(s)" in said and code != 0
        assert len(missing) == 1 and role == "--worker"
    if role != "tpot_locust.sim":  # a killed simulator's last buffered truth died with it
        truth = truth_lines(out)
        # each process's own window where it said it (a worker's closes at its own stop),
        # the run's for the rest (a worker that died said none), as the truth check
        run = summary["run"]
        window, own = run["window_wall_ns"], run.get("process_windows_wall_ns") or {}
        sent = window_truth_gaps(truth, window) + sum(
            window_truth_gaps(truth, its, tag) - window_truth_gaps(truth, window, tag)
            for tag, its in own.items()
        )
        assert summary["metrics"]["itl"]["count"] <= sent


def test_a_killed_supervisor_takes_its_children_and_report_makes_the_folder(tmp_path: Path) -> None:
    out, log = tmp_path / "out", tmp_path / "run.log"
    run = _start(out, log)
    _role(psutil.Process(run.pid), "--master")
    time.sleep(KILL_AFTER_S)
    run.send_signal(signal.SIGKILL)
    run.wait(timeout=10)
    deadline = time.monotonic() + 30
    while _left_running(out) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not _left_running(out), _left_running(out)
    made = run_command([sys.executable, "-m", "tpot_locust", "report", str(out), "--json"], 60)
    assert made.returncode == 0, made.stderr
    summary = json.loads(made.stdout)
    assert summary["metrics"]["itl"]["count"] > 0


def test_a_killed_local_run_is_rebuilt_from_its_checkpoint(tmp_path: Path) -> None:
    """No workers to ask: the Locust process's ``checkpoint.json`` (its totals each report
    interval) makes the folder. Within 20 s of the kill, exit 3, marked incomplete, with
    every gap the truth sent up to 4 s before the kill and never more than it sent."""
    out, log = tmp_path / "out", tmp_path / "run.log"
    run = _start(out, log, workers=0)
    try:
        locust = _role(psutil.Process(run.pid), "--headless")
        _when_said(log, "Ramping to 8 users")
        time.sleep(KILL_AFTER_S)
        kill_wall_ns, code, took = _kill_and_wait(run, locust)
    finally:
        if run.poll() is None:
            run.kill()
    said = log.read_text()
    assert took < 20 and code == 3, (took, code, said[-3000:])
    assert "the Locust process was killed (SIGKILL)" in said, said[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["complete"] is False
    assert "rebuilt from its last checkpoint" in summary["run"]["recovered"]
    assert not (out / "checkpoint.json").exists()  # histograms.json holds it now
    truth = truth_lines(out)
    window = summary["run"]["window_wall_ns"]
    assert window[1] <= kill_wall_ns  # the window the checkpoint holds, not the planned one
    up_to = window_truth_gaps(truth, [window[0], kill_wall_ns - 4_000_000_000])
    counted = summary["metrics"]["itl"]["count"]
    assert 1000 < up_to <= counted <= window_truth_gaps(truth, [window[0], kill_wall_ns])
    assert not _left_running(out)


@pytest.mark.parametrize(
    "phase", [pytest.param(SPAWN, id="spawn"), pytest.param(DRAIN, id="drain")]
)
def test_a_master_killed_while_spawning_or_draining(tmp_path: Path, phase: str) -> None:
    """The master SIGKILLed as it sends the workers their users, or as the run time ends
    (the steady state: ``test_master_death.py``): the run ends within 20 s, exit 3, a
    summary marked incomplete that never counts a gap the truth did not send (or, killed
    before any user streamed, "nothing was measured"), no process left, and no partial
    file (every results file reads whole)."""
    out, log = tmp_path / "out", tmp_path / "run.log"
    run = _start(out, log)
    try:
        master = _role(psutil.Process(run.pid), "--master")
        _when_said(log, phase)
        kill_wall_ns, code, took = _kill_and_wait(run, master)
    finally:
        if run.poll() is None:
            run.kill()
    said = log.read_text()
    assert took < 20 and code == 3, (took, code, said[-3000:])
    assert "Traceback" not in said, said[-3000:]
    assert not _left_running(out)
    _assert_each_file_whole(out)
    if not (out / "summary.json").exists():  # killed before a worker had a user: none saved
        assert phase == "Sending spawn jobs", said[-3000:]
        assert "nothing was measured: the run saved no results (Locust exited -9)" in said
        return
    summary = json.loads((out / "summary.json").read_text())
    assert summary["complete"] is False
    truth = truth_lines(out)
    window = summary["run"]["window_wall_ns"] or [0, kill_wall_ns]
    assert summary["metrics"]["itl"]["count"] <= window_truth_gaps(truth, [window[0], 2**63])


def test_a_master_stopped_thirty_seconds_loses_nothing_and_says_so(tmp_path: Path) -> None:
    """SIGSTOP of the master for 30 s (a paused VM or container): its workers stream on and
    their deltas wait for it. Once it runs again the run ends within 15 s, exit 0, every
    gap of the window counted once, and the report says the master was held."""
    out, log = tmp_path / "out", tmp_path / "run.log"
    run = _start(out, log)
    try:
        master = _role(psutil.Process(run.pid), "--master")
        _when_said(log, "All users spawned")
        time.sleep(1)
        master.suspend()
        time.sleep(30)
        master.resume()
        resumed = time.monotonic()
        code = run.wait(timeout=60)
        took = time.monotonic() - resumed
    finally:
        if run.poll() is None:
            run.kill()
    said = log.read_text()
    assert took < 15 and code == 0, (took, code, said[-3000:])
    assert "! the master was held 3" in said, said[-3000:]  # 30-something seconds
    summary = json.loads((out / "summary.json").read_text())
    assert summary["complete"] is True
    truth = truth_lines(out)
    in_window = window_truth_gaps(truth, summary["run"]["window_wall_ns"])
    assert summary["metrics"]["itl"]["count"] == in_window > 1000
    assert not _left_running(out)


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a small tmpfs needs root")
def test_full_disk(tmp_path: Path) -> None:
    """ENOSPC while a run writes (a 1 MiB tmpfs): the run ends in bounded time, one clear
    line names the file and the error, no traceback, exit 3, nothing left running."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(disk)], capture_output=True
    )
    if mounted.returncode != 0:  # a container without the right to mount
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode(errors='replace')[:200]}")
    try:
        out, log = disk / "out", tmp_path / "run.log"
        started = time.monotonic()
        run = _start(out, log)
        code = run.wait(timeout=RUN_S + 90)
        took = time.monotonic() - started
        said = log.read_text()
        assert code == 3 and took < RUN_S + 60, (code, took, said[-3000:])
        assert "No space left on device" in said, said[-3000:]
        assert "Traceback" not in said, said[-3000:]
        # what was measured is on the terminal all the same
        assert "TPOT: gap of every output token after the first" in said, said[-3000:]
        assert not _left_running(out)
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)
