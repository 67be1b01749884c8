"""Rates count tokens as they arrive: a request longer than an interval adds to every
interval it streams through, not only to the one it ends in."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tests.conftest import run_command


def test_long_requests_show_a_steady_rate_in_every_interval(tmp_path: Path) -> None:
    out = tmp_path / "run"
    result = run_command(
        [
            sys.executable,
            "-m",
            "tpot_locust",
            "run",
            "scenarios/quickstart.yaml",
            "--users",
            "2",
            "--run-time",
            "8s",
            "--out",
            str(out),
            "--set",
            "classes.chat.output_tokens=2000",
            "--set",
            "classes.chat.prompt_tokens=16",
            "--set",
            "simulator.gap_ms=2",
            "--set",
            "simulator.ttft_ms=5",
        ],
        timeout=120,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    summary = json.loads((out / "summary.json").read_text())
    # each request streams ~4 s (2,000 tokens at 2 ms): before, most intervals counted 0
    points = [p for p in summary["timeseries"] if not p.get("partial")][1:]
    assert len(points) >= 4
    rates = [p["tokens_per_s"] for p in points]
    assert all(400 < rate < 1200 for rate in rates), rates  # 2 streams x ~500 tokens/s
    # and the series adds up to what arrived (every request in full, interrupted ones partly)
    arrived = sum(
        p["tokens_per_s"] * p["interval_s"]
        for p in summary["timeseries"]
        if p["tokens_per_s"] is not None
    )
    assert arrived >= summary["tokens"]["output"] * 0.95
