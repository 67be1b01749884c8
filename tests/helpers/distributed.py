"""Start a real Locust master and workers on 127.0.0.1 (helpers for the tests)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.conftest import ROOT
from tpot_locust.cli.master_api import MasterAPI
from tpot_locust.cli.run import free_port

__all__ = ["Cluster", "free_port", "start_cluster", "start_web_cluster", "stop_processes",
           "wait_for_workers"]  # fmt: skip

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
    host: str, out: Path, workers: int, users: int, run_time: str, *extra: str,
    env: dict[str, str] | None = None, locustfile: str = LOCUSTFILE,
) -> Cluster:  # fmt: skip
    port = free_port()
    environment = dict(os.environ, PYTHONUNBUFFERED="1", **(env or {}))
    locust = [sys.executable, "-m", "locust", "-f", locustfile]
    master = subprocess.Popen(
        [*locust, "--master", "--headless", "--expect-workers", str(workers),
         "--master-bind-host", "127.0.0.1", "--master-bind-port", str(port),
         "-u", str(users), "-r", str(users), "-t", run_time, "--host", host,
         "--tpot-out", str(out), *extra],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=environment, cwd=ROOT,
    )  # fmt: skip
    worker_processes = [
        subprocess.Popen(
            [*locust, "--worker", "--master-host", "127.0.0.1", "--master-port", str(port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            text=True,
            env=environment,
            cwd=ROOT,
        )  # fmt: skip
        for _ in range(workers)
    ]
    return Cluster(master, worker_processes)


def start_web_cluster(
    locustfile: Path, host: str, web_port: int, out: Path, workers: int, stop_timeout: int,
    env: dict[str, str] | None = None,
) -> list[subprocess.Popen[bytes]]:  # fmt: skip
    """A master with its web UI on 127.0.0.1:``web_port`` and ``workers`` workers, as one
    starts them on a cluster (the master first in the list; ``stop_processes`` ends them)."""
    environment = dict(os.environ, **(env or {}))
    port = free_port()
    locust = [sys.executable, "-m", "locust", "-f", str(locustfile)]
    master = [*locust, "--master", "--master-bind-host", "127.0.0.1", "--master-bind-port",
              str(port), "--web-host", "127.0.0.1", "--web-port", str(web_port), "--host", host,
              "--tpot-out", str(out), "--stop-timeout", str(stop_timeout)]  # fmt: skip
    worker = [*locust, "--worker", "--master-host", "127.0.0.1", "--master-port", str(port)]
    quiet: dict[str, Any] = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL,
                             "env": environment, "cwd": ROOT}  # fmt: skip
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
