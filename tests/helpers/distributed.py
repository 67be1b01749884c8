"""Start a real Locust master and workers on 127.0.0.1 (helpers for the tests)."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tests.conftest import ROOT
from tpot_locust.cli.run import free_port

__all__ = ["Cluster", "free_port", "start_cluster"]

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
    env: dict[str, str] | None = None,
) -> Cluster:  # fmt: skip
    port = free_port()
    environment = dict(os.environ, PYTHONUNBUFFERED="1", **(env or {}))
    locust = [sys.executable, "-m", "locust", "-f", LOCUSTFILE]
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
