from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tpot_locust.harness.watch import loop_yield

# In-process tests stream under gevent as the harness does: aggregation yields to its loop.
loop_yield.install()

ROOT = Path(__file__).resolve().parents[1]


def run_command(args: list[str], timeout: float, **kwargs) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONUNBUFFERED="1", **kwargs.pop("env", {}))
    cwd = kwargs.pop("cwd", ROOT)
    return subprocess.run(
        args, capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd, **kwargs
    )


def run_scenario(
    scenario: Path, out: Path, *args: str, timeout: float = 120
) -> tuple[dict, subprocess.CompletedProcess[str]]:
    """``tpot-locust run SCENARIO --out OUT [args]``, which must exit 0; its summary."""
    result = run_command(
        [sys.executable, "-m", "tpot_locust", "run", str(scenario), "--out", str(out), *args],
        timeout=timeout,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return json.loads((out / "summary.json").read_text()), result


def truth_requests(out: Path) -> list[dict]:
    """The simulator's truth lines of a run's requests, in the order they arrived."""
    lines = [json.loads(line) for line in (out / "truth.jsonl").read_text().splitlines()]
    return sorted((e for e in lines if "request_id" in e), key=lambda e: e["arrival_ns"])


@pytest.fixture
def python() -> str:
    return sys.executable


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """``unit``: tests/unit (no process or server started: minutes); ``process``:
    tests/process (real processes and servers on 127.0.0.1: minutes); ``real_engine``:
    tests/real_engine (vLLM's CPU build and transformers serve: their environments are
    built on first use, ~5 minutes, then cached)."""
    for item in items:
        layer = item.path.parent.name
        if layer in ("unit", "process", "real_engine"):
            item.add_marker(layer)
