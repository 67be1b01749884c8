"""Start a real Locust master and workers on 127.0.0.1 (helpers for the tests)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tests.conftest import ROOT
from tpot_locust.cli.locust_command import free_port
from tpot_locust.cli.master_api import MasterAPI
from tpot_locust.common.run_facts import RunFacts
from tpot_locust.report.truth_check import TruthWindow

__all__ = [
    "Cluster",
    "free_port",
    "start_cluster",
    "start_web_cluster",
    "stop_processes",
    "wait_for_workers",
]

LOCUSTFILE = str(ROOT / "tests/helpers/locust_distributed.py")


@dataclass
class Cluster:
    master: subprocess.Popen[str]
    workers: list[subprocess.Popen[str]]

    def wait(self, timeout: float) -> tuple[int, str]:
        try:
            output, _ = self.master.communicate(timeout=timeout)
        finally:
            for worker in self.workers:
                try:
                    worker.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    worker.kill()
                    worker.wait()
        return self.master.returncode, output


def start_cluster(
    host: str,
    out: Path,
    workers: int,
    users: int,
    run_time: str,
    *extra: str,
    env: dict[str, str] | None = None,
    locustfile: str = LOCUSTFILE,
    worker_env: dict[str, str] | None = None,
) -> Cluster:
    """``worker_env``: the first worker's own environment on top (a machine set up apart)."""
    port = free_port()
    environment = dict(os.environ, PYTHONUNBUFFERED="1", **(env or {}))
    locust = [sys.executable, "-m", "locust", "-f", locustfile]
    master = subprocess.Popen(
        [
            *locust,
            "--master",
            "--headless",
            "--expect-workers",
            str(workers),
            "--master-bind-host",
            "127.0.0.1",
            "--master-bind-port",
            str(port),
            "-u",
            str(users),
            "-r",
            str(users),
            "-t",
            run_time,
            "--host",
            host,
            "--tpot-out",
            str(out),
            *extra,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=environment,
        cwd=ROOT,
    )
    worker_processes = [
        subprocess.Popen(
            [*locust, "--worker", "--master-host", "127.0.0.1", "--master-port", str(port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            text=True,
            env=dict(environment, **(worker_env or {})) if number == 0 else environment,
            cwd=ROOT,
        )
        for number in range(workers)
    ]
    return Cluster(master, worker_processes)


def start_web_cluster(
    locustfile: Path,
    host: str,
    web_port: int,
    out: Path,
    workers: int,
    stop_timeout: int,
    env: dict[str, str] | None = None,
) -> list[subprocess.Popen[bytes]]:
    """A master with its web UI on 127.0.0.1:``web_port`` and ``workers`` workers, as one
    starts them on a cluster (the master first in the list; ``stop_processes`` ends them)."""
    environment = dict(os.environ, **(env or {}))
    port = free_port()
    locust = [sys.executable, "-m", "locust", "-f", str(locustfile)]
    master = [
        *locust,
        "--master",
        "--master-bind-host",
        "127.0.0.1",
        "--master-bind-port",
        str(port),
        "--web-host",
        "127.0.0.1",
        "--web-port",
        str(web_port),
        "--host",
        host,
        "--tpot-out",
        str(out),
        "--stop-timeout",
        str(stop_timeout),
    ]
    worker = [*locust, "--worker", "--master-host", "127.0.0.1", "--master-port", str(port)]
    quiet: dict[str, Any] = {
        "stdout": subprocess.DEVNULL,
        "stderr": subprocess.DEVNULL,
        "env": environment,
        "cwd": ROOT,
    }
    return [subprocess.Popen(master, **quiet)] + [
        subprocess.Popen(worker, **quiet) for _ in range(workers)
    ]


def wait_for_workers(ui: str, count: int, timeout_s: float = 60) -> None:
    """Until ``count`` workers are connected to the master whose web UI is ``ui``."""
    deadline = time.monotonic() + timeout_s
    while MasterAPI(ui).state().workers < count:
        assert time.monotonic() < deadline, f"fewer than {count} workers connected"
        time.sleep(0.5)


def stop_processes(processes: list[subprocess.Popen[bytes]]) -> None:
    for process in processes:
        process.terminate()
    for process in processes:
        process.wait(timeout=30)


# A worker's gaps inside its window, against the truth of the same window: the truth also
# holds the gaps the server sent just before the window closed that the worker read no
# more (its users were killed at the stop, the loop held by Locust's stop for 25-80 ms):
# at most this many a stream (2 ms gaps).
EDGE_GAPS_PER_STREAM = 50


def window_truth_gaps(truth: list[dict], window: list[int], prefix: str = "") -> int:
    """Token gaps the simulator sent inside ``window`` (wall ns) for requests whose id
    starts with ``prefix``, finished or cut (docs/metrics.md, "The window")."""
    held = TruthWindow(RunFacts(window_wall_ns=window))  # the truth check's own rule
    total = 0
    for entry in truth:
        sends = entry.get("send_ns") or []
        if entry.get("request_id", "").startswith(prefix) and len(sends) > 1:
            total += int(np.count_nonzero(held.gaps(np.asarray(sends, dtype=np.int64), {})))
    return total


def assert_window_truth(measured: int, truth: int, streams: int) -> None:
    """``measured`` is ``truth`` but for the gaps at the window's closing edge."""
    assert truth - EDGE_GAPS_PER_STREAM * streams <= measured <= truth, (measured, truth)
