"""Published traces replayed against the simulator (issue 31): every request sent once, on
the trace's clock, with the trace's lengths (the simulator counts the prompt's words, which
the prompt builder makes equal to the trace's input length)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from tests.conftest import ROOT, run_scenario
from tpot_locust.scenario.model import TraceSpec
from tpot_locust.scenario.trace_formats import load_trace_spec

SAMPLES = {"mooncake": "mooncake_sample.jsonl", "bailian": "bailian_sample.jsonl",
           "azure": "azure_sample.csv", "burstgpt": "burstgpt_sample.csv"}  # fmt: skip


@pytest.mark.parametrize("fmt", sorted(SAMPLES))
def test_a_published_trace_replays_with_its_lengths_on_its_clock(
    tmp_path: Path, fmt: str
) -> None:  # fmt: skip
    trace = ROOT / "scenarios" / "traces" / SAMPLES[fmt]
    _, expected = load_trace_spec(TraceSpec(file=str(trace)))
    scenario = tmp_path / "replay.yaml"
    scenario.write_text(
        f"name: replay-{fmt}\nduration: 8s\nclasses:\n  replay:\n"
        f"    trace: {{file: {trace}, format: {fmt}}}\n"
        "simulator: {ttft_ms: 5, gap_ms: 1}\n"
    )
    out = tmp_path / "out"
    summary, _ = run_scenario(scenario, out)
    assert summary["requests"]["ok"] == len(expected) and summary["requests"]["failed"] == 0
    assert summary["metrics"]["schedule_lag"]["p50"] < 20.0  # ms behind (the first: a connect)
    records = sorted((json.loads(line) for line in (out / "truth.jsonl").read_text().splitlines()
                      if '"request_id"' in line), key=lambda r: r["arrival_ns"])  # fmt: skip
    sent = Counter((r["prompt_tokens"], r["completion_tokens"]) for r in records)
    assert sent == Counter((r.input_tokens, r.output_tokens) for r in expected)
    # on the trace's clock: none early, each at most 100 ms late (the first also connects)
    times_s = sorted(r.t_s for r in expected)
    lateness = [r["arrival_ns"] / 1e9 - t for r, t in zip(records, times_s, strict=True)]
    start = min(lateness)  # the run's time 0, as the least late request shows it
    assert all(0 <= late - start < 0.1 for late in lateness), (lateness, times_s)
