"""The Locust master dies mid-run (issue 57): an OOM kill, an evicted pod, SIGKILL.

``tpot-locust run --workers 2`` against the embedded simulator, its master SIGKILLed 12 s
into a 30 s run: the supervisor notices at once, stops the workers (each saves everything
it recorded), and finishes the folder from their records: the run ends within 20 s of the
kill (it waited 60 s for Locust's heartbeat, then saved nothing), ``summary.json`` says it is
incomplete and what it was rebuilt from, and it holds every gap the truth sent up to 4 s
before the kill (the workers' records hold every gap they read, each once). No process is
left; ``report`` reads the folder as any other.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

from tests.conftest import ROOT, run_command
from tests.helpers.distributed import window_truth_gaps
from tests.helpers.why_runs import truth_lines
from tpot_locust.common.child_process import child_options

KILL_AFTER_S = 12.0
ENDS_WITHIN_S = 20.0


def _master(supervisor: psutil.Process) -> psutil.Process | None:
    for child in supervisor.children(recursive=True):
        try:
            if "--master" in child.cmdline():
                return child
        except psutil.NoSuchProcess:
            continue
    return None


def test_a_killed_master_loses_nothing_the_workers_recorded(tmp_path: Path) -> None:
    out = tmp_path / "out"
    args = ["run", "scenarios/quickstart.yaml", "--workers", "2", "--run-time", "30s"]
    log = (tmp_path / "run.log").open("w")
    run = subprocess.Popen(
        [sys.executable, "-m", "tpot_locust", *args, "--out", str(out)],
        cwd=ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
        **child_options(),
    )
    try:
        supervisor = psutil.Process(run.pid)
        deadline = time.monotonic() + 60
        while (master := _master(supervisor)) is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert master is not None, (tmp_path / "run.log").read_text()
        time.sleep(KILL_AFTER_S)
        kill_wall_ns = time.time_ns()
        master.send_signal(signal.SIGKILL)
        killed = time.monotonic()
        code = run.wait(timeout=60)
        took = time.monotonic() - killed
    finally:
        if run.poll() is None:
            run.kill()
        log.close()
    said = (tmp_path / "run.log").read_text()
    print(f"the run ended {took:.1f} s after its master was killed")  # shown with pytest -rP
    assert took < ENDS_WITHIN_S, (took, said[-3000:])
    assert code == 3, said[-3000:]
    assert "the Locust master was killed (SIGKILL)" in said
    summary = json.loads((out / "summary.json").read_text())
    assert summary["complete"] is False
    assert "rebuilt from 2 worker records" in summary["run"]["recovered"]
    assert "INCOMPLETE RUN: the Locust master's results were lost" in said
    # every gap the truth sent from the window's start up to 4 s before the kill is there
    truth = truth_lines(out)
    start_ns = summary["run"]["window_wall_ns"][0]
    before_kill = window_truth_gaps(truth, [start_ns, kill_wall_ns - 4_000_000_000])
    assert before_kill > 1000 and summary["metrics"]["itl"]["count"] >= before_kill
    # none left running; the folder reads as any other
    assert not [
        p for p in psutil.process_iter(["cmdline"]) if str(out) in " ".join(p.info["cmdline"] or [])
    ]
    again = run_command([sys.executable, "-m", "tpot_locust", "report", str(out), "--json"], 60)
    assert again.returncode == 0 and json.loads(again.stdout)["complete"] is False


def test_report_rebuilds_a_folder_whose_master_and_supervisor_died(tmp_path: Path) -> None:
    """A folder with the workers' records and no ``histograms.json`` (the supervisor died
    too, or the machine): ``report`` rebuilds it from them, whole again, marked incomplete."""
    out = tmp_path / "out"
    result = run_command(
        [sys.executable, "-m", "tpot_locust", "run", "scenarios/quickstart.yaml"]
        + ["--workers", "2", "--run-time", "5s", "--out", str(out)],
        180,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    whole = json.loads((out / "summary.json").read_text())
    for name in ("histograms.json", "summary.json", "report.html", "report.txt"):
        (out / name).unlink()
    again = run_command([sys.executable, "-m", "tpot_locust", "report", str(out), "--json"], 60)
    assert again.returncode == 0, again.stderr
    assert "rebuilt from 2 worker records" in again.stderr
    rebuilt = json.loads(again.stdout)
    assert rebuilt["complete"] is False and (out / "histograms.json").is_file()
    for metric in ("itl", "ttft", "e2e"):  # the workers' records are everything merged
        assert rebuilt["metrics"][metric]["count"] == whole["metrics"][metric]["count"], metric
    assert rebuilt["requests"]["ok"] == whole["requests"]["ok"]
