"""A failing server is backed off from, a run of nothing but the same client error stops
with its cause, and a dead host is named before the run starts."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT, run_command
from tests.helpers.fault_server import FaultServer
from tpot_locust.sim.process import start_simulator


def _run(
    tmp_path: Path,
    host: str,
    seconds: int,
    env: dict[str, str] | None = None,
    model: str = "tpot-sim",
):
    out = tmp_path / "out"
    started = time.monotonic()
    result = run_command(
        [
            sys.executable,
            "-m",
            "tpot_locust",
            "run",
            "scenarios/quickstart.yaml",
            "--host",
            host,
            "--run-time",
            f"{seconds}s",
            "--users",
            "4",
            "--out",
            str(out),
            "--set",
            f"server.model={model}",
        ],
        timeout=120,
        env=env or {},
    )
    return result, time.monotonic() - started, out


def test_a_run_of_client_errors_stops_with_the_cause(tmp_path: Path) -> None:
    with start_simulator() as sim:
        result, took, out = _run(tmp_path, f"{sim.url}/wrong-prefix", 60)
    assert result.returncode == 1, result.stdout[-2000:] + result.stderr[-2000:]
    assert took < 40, took  # stopped long before the 60 s
    output = result.stdout + result.stderr
    assert "Likely fix: check the host" in output
    assert "RUN STOPPED EARLY" in output
    assert "Traceback" not in output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["run"]["stopped_because"]
    assert 20 <= summary["requests"]["failed"] <= 60


def test_failures_are_backed_off_from(tmp_path: Path) -> None:
    with start_simulator() as sim:
        result, _, out = _run(
            tmp_path, f"{sim.url}/wrong-prefix", 6, env={"TPOT_MAX_CLIENT_ERRORS": "0"}
        )
    summary = json.loads((out / "summary.json").read_text())
    failed = summary["requests"]["failed"]
    assert failed > 0
    assert failed <= 4 * 6 * 2, failed  # at most ~2 a second per user (was ~400)


def test_a_dead_host_is_named_before_the_run(tmp_path: Path) -> None:
    with start_simulator() as sim:
        dead = sim.url  # a port that just closed
    started = time.monotonic()
    result = run_command(
        [
            sys.executable,
            "-m",
            "tpot_locust",
            "run",
            str(ROOT / "scenarios/quickstart.yaml"),
            "--host",
            dead,
            "--out",
            str(tmp_path / "out"),
        ],
        timeout=60,
    )
    assert result.returncode == 1
    assert "cannot connect to" in result.stderr and "is the server running" in result.stderr
    assert time.monotonic() - started < 20


@pytest.mark.parametrize(
    ("fault", "status", "fix"),
    [
        ("strict", 422, "set server.ignore_eos: false and server.min_tokens: false"),
        ("echo_key", 401, "set the API key in the environment variable"),
    ],
)
def test_a_server_refusing_every_request_is_not_flooded(
    tmp_path: Path, fault: str, status: int, fix: str
) -> None:
    with FaultServer() as server:
        result, took, out = _run(tmp_path, server.url, 60, model=f"fault:{fault}")
        sent = server.requests[fault]
    output = result.stdout + result.stderr
    assert result.returncode == 1, output[-3000:]
    assert "Traceback" not in output
    assert took < 40, took
    assert f"HTTP {status}" in output and fix in output
    assert sent <= 4 * took * 3, (sent, took)  # a few requests a second per user at most
    summary = json.loads((out / "summary.json").read_text())
    requests = summary["requests"]
    assert (
        requests["failed"] + requests["interrupted"] == sent and summary["run"]["stopped_because"]
    )
