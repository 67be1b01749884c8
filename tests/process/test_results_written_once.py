"""Each results file is written once, by one process (``common.results_folder``).

Every Python process of the run (``tpot-locust run``, the simulator, the Locust master and
workers) gets an audit hook from a ``sitecustomize`` on ``PYTHONPATH``: it logs each file
opened for writing and each rename into the results folder, with its process id. A file
written twice (a summary rewritten after the truth check, a verdict gated in two processes)
fails here, naming the file and the processes. The one file rewritten by design,
``checkpoint.json`` (``report.checkpoint``), is held to one process and to being gone once the
run saved whole.
"""

from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path

import pytest

from tests.conftest import ROOT, run_command
from tests.helpers.distributed import free_port
from tpot_locust.sim.process import start_simulator

HOOK = """\
import os
import sys

_LOG = os.environ.get("TPOT_TEST_WRITE_LOG")
_ROOT = os.environ.get("TPOT_TEST_WRITE_ROOT")
_WRITING = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
if _LOG and _ROOT:
    _fd = os.open(_LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT)

    def _note(path):
        text = os.fsdecode(path) if isinstance(path, (str, bytes, os.PathLike)) else ""
        full = os.path.abspath(text) if text else ""
        if full.startswith(_ROOT + os.sep) and not full.endswith(".tmp"):
            os.write(_fd, f"{os.getpid()} {os.path.relpath(full, _ROOT)}\\n".encode())

    def _hook(event, args):
        if event == "open":
            path, mode, flags = args
            writing = any(c in mode for c in "wax+") if isinstance(mode, str) else False
            if writing or (isinstance(flags, int) and flags & _WRITING):
                _note(path)
        elif event == "os.rename":
            _note(args[1])

    sys.addaudithook(_hook)
"""
SCENARIO = """\
name: written-once
duration: 4s
seed: 3
spawn_rate: 4
server: {api: chat, include_usage: true, ignore_eos: true}
classes:
  chat: {users: 4, prompt_tokens: 64, output_tokens: 32}
simulator: {ttft_ms: 10, gap_ms: 2}
slo:
  tpot: {p50: 100ms}
  client_stalls: decisive  # the hook slows the client: a stall must not decide here
"""


def writes(tmp_path: Path, args: list[str], out: Path) -> dict[str, set[str]]:
    """Run ``args`` with the hook; each file under ``out`` -> the process ids of its
    writes, one entry a write (``checkpoint.json``, rewritten each interval by one
    process, left out)."""
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(HOOK)
    log = tmp_path / "writes.log"
    log.unlink(missing_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    env = {
        "PYTHONPATH": f"{site}:{ROOT}",
        "TPOT_TEST_WRITE_LOG": str(log),
        "TPOT_TEST_WRITE_ROOT": str(out.resolve()),
    }
    result = run_command(args, timeout=120, env=env)
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    seen: dict[str, list[str]] = defaultdict(list)
    for line in log.read_text().splitlines():
        pid, name = line.split(" ", 1)
        seen[name].append(pid)
    assert seen, "the hook saw no write: it did not load"
    checkpoints = set(seen.pop(CHECKPOINT, []))  # rewritten each interval, by design
    assert len(checkpoints) <= 1, f"{CHECKPOINT} written by several processes: {checkpoints}"
    assert not (out / CHECKPOINT).exists(), "the run saved whole: its checkpoint is removed"
    twice = {name: pids for name, pids in seen.items() if len(pids) > 1}
    assert not twice, f"written more than once (file: writing process ids): {twice}"
    return {name: set(pids) for name, pids in seen.items()}


CHECKPOINT = "checkpoint.json"  # the master's (or local runner's) totals as they go
FINISHED = {
    "summary.json",
    "histograms.json",
    "report.html",
    "verdict.json",
    "junit.xml",
    "summary.md",
}


@pytest.mark.parametrize("workers", [0, 2])
def test_tpot_locust_run_writes_each_file_once(tmp_path: Path, workers: int) -> None:
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text(SCENARIO)
    out = tmp_path / "out"
    args = [sys.executable, "-m", "tpot_locust", "run", str(scenario), "--out", str(out)]
    seen = writes(tmp_path, [*args, "--workers", str(workers)], out)
    assert FINISHED | {"scenario.yaml", "truth.jsonl"} <= set(seen)
    finishing = {pid for name in FINISHED - {"histograms.json"} for pid in seen[name]}
    assert len(finishing) == 1, "one process finishes the run"
    assert seen["scenario.yaml"] == finishing  # tpot-locust run: the supervisor
    assert seen["histograms.json"] != finishing  # its Locust master saved its input
    if workers:
        assert len([name for name in seen if name.startswith("workers/")]) == workers


def test_plain_locust_writes_each_file_once(tmp_path: Path) -> None:
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text(SCENARIO)
    out = tmp_path / "out"
    with start_simulator("--gap-ms", "2", "--ttft-ms", "10") as simulator:
        seen = writes(
            tmp_path,
            [
                sys.executable,
                "-m",
                "locust",
                "-f",
                str(ROOT / "locustfiles/chat.py"),
                "--headless",
                "-u",
                "4",
                "-r",
                "4",
                "-t",
                "4s",
                "--host",
                simulator.url,
                "--only-summary",
                "--tpot-out",
                str(out),
                "--tpot-slo",
                str(scenario),
            ],
            out,
        )
    assert FINISHED <= set(seen)
    assert len({pid for name in FINISHED for pid in seen[name]}) == 1  # the local runner


def test_plain_locust_with_workers_writes_each_file_once(tmp_path: Path) -> None:
    """A master and two workers as a cluster starts them: the master finishes the run, each
    worker writes its own audit, nothing twice."""
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text(SCENARIO)
    out = tmp_path / "out"
    port = free_port()
    locust = f"{sys.executable} -m locust -f {ROOT / 'tests/helpers/locust_distributed.py'}"
    with start_simulator("--gap-ms", "2", "--ttft-ms", "10") as simulator:
        worker = f"{locust} --worker --master-host 127.0.0.1 --master-port {port} --tpot-out {out}"
        master = (
            f"{locust} --master --headless --expect-workers 2 --master-bind-host "
            f"127.0.0.1 --master-bind-port {port} -u 4 -r 4 -t 4s --host {simulator.url} "
            f"--only-summary --tpot-out {out} --tpot-slo {scenario}"
        )
        command = f"{worker} & {worker} & {master}; code=$?; wait; exit $code"
        seen = writes(tmp_path, ["bash", "-c", command], out)
    assert FINISHED <= set(seen)
    finishing = {pid for name in FINISHED for pid in seen[name]}
    assert len(finishing) == 1  # the master
    audits = {name: pids for name, pids in seen.items() if name.startswith("workers/")}
    assert len(audits) == 2
    writers = set().union(*audits.values())
    assert len(writers) == 2 and not writers & finishing  # each worker its own, once
