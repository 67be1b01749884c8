"""Rates count tokens as they arrive: a request longer than an interval adds to every
interval it streams through, not only to the one it ends in."""

from __future__ import annotations

import json
import sys
from array import array
from pathlib import Path

from tests.conftest import run_command
from tpot_locust.common.token_flow import TokenFlow


def test_token_flow_counts_live_streams_at_each_take() -> None:
    flow = TokenFlow()
    counts = array("q", [1, 1])
    flow.start(1, "chat", counts)
    assert flow.take() == {"chat": 2}
    counts.extend([3, 1])
    assert flow.take() == {"chat": 4}
    counts.append(1)
    flow.end(1)  # the last event arrived after the last take: counted at the next
    assert flow.take() == {"chat": 1}
    assert flow.take() == {}
    flow.start(2, "chat", array("q", [1]))
    flow.end(2, array("q", [1, 1, 1]))  # the final counts replaced the live ones
    assert flow.take() == {"chat": 3}


def test_long_requests_show_a_steady_rate_in_every_interval(tmp_path: Path) -> None:
    out = tmp_path / "run"
    result = run_command(
        [sys.executable, "-m", "tpot_locust", "run", "scenarios/quickstart.yaml", "--users", "2",
         "--run-time", "8s", "--out", str(out), "--set", "classes.chat.output_tokens=2000",
         "--set", "classes.chat.prompt_tokens=16", "--set", "simulator.gap_ms=2",
         "--set", "simulator.ttft_ms=5"],
        timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    summary = json.loads((out / "summary.json").read_text())
    # each request streams ~4 s (2,000 tokens at 2 ms): before, most intervals counted 0
    points = [p for p in summary["timeseries"] if not p.get("partial")][1:]
    assert len(points) >= 4
    rates = [p["tokens_per_s"] for p in points]
    assert all(400 < rate < 1200 for rate in rates), rates  # 2 streams x ~500 tokens/s
    # and the series adds up to what arrived (every request in full, interrupted ones partly)
    arrived = sum(p["tokens_per_s"] * p["interval_s"] for p in summary["timeseries"] if
                  p["tokens_per_s"] is not None)  # fmt: skip
    assert arrived >= summary["tokens"]["output"] * 0.95
