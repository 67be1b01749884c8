"""Real engines serving the tiny model, one start per test module, and runs against them.

The engines' environments are built on first use (``tests/engines``); set
``TPOT_REAL_ENGINES=skip`` to skip these tests (``-m "not real_engine"`` does the same).
Each run's figures are appended to ``$TPOT_RESULTS_DIR/real-engines.jsonl`` (CI keeps it in
``.ci-results/``), so what a CI run measured can be read afterwards.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT, run_command
from tests.engines import servers

RESULTS_ENV = "TPOT_RESULTS_DIR"


def pytest_runtest_setup(item: pytest.Item) -> None:
    if os.environ.get("TPOT_REAL_ENGINES") == "skip":
        pytest.skip("TPOT_REAL_ENGINES=skip")


@pytest.fixture(scope="module")
def engine_logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("engine")


def serve(engine: str, logs: Path, extra: list[str] | None = None) -> Iterator[servers.Engine]:
    with servers.serve(engine, logs, extra) as server:
        yield server


def run_scenario(scenario: str, host: str, out: Path, *args: str) -> dict[str, Any]:
    """``tpot-locust run`` as a user runs it; its summary.json (the run must succeed)."""
    result = run_command(
        [
            sys.executable,
            "-m",
            "tpot_locust",
            "run",
            scenario,
            "--host",
            host,
            "--out",
            str(out),
            *args,
        ],
        timeout=300,
    )
    assert result.returncode in (0, 3), result.stdout[-4000:] + result.stderr[-4000:]
    print(result.stdout[-6000:])
    return json.loads((out / "summary.json").read_text())


def record_result(name: str, **figures: Any) -> None:
    """One line of what a real-engine run measured, for CI's results folder."""
    folder = Path(os.environ.get(RESULTS_ENV) or ROOT / ".ci-results")
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / "real-engines.jsonl").open("a") as sink:
        sink.write(json.dumps({"test": name, **figures}) + "\n")


def burst_over_steady(summary: dict[str, Any], statistic: str = "p99") -> float:
    interference = summary["interference"]
    assert interference, "no token gap fell in a burst window"
    burst = interference["phases"]["burst"]["tpot"][statistic]
    steady = interference["phases"]["steady"]["tpot"][statistic]
    return burst / steady
