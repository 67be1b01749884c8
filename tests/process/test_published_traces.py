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

SAMPLES = {
    "mooncake": "mooncake_sample.jsonl",
    "bailian": "bailian_sample.jsonl",
    "azure": "azure_sample.csv",
    "burstgpt": "burstgpt_sample.csv",
}


@pytest.mark.parametrize("fmt", sorted(SAMPLES))
def test_a_published_trace_replays_with_its_lengths_on_its_clock(tmp_path: Path, fmt: str) -> None:
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
    records = sorted(
        (
            json.loads(line)
            for line in (out / "truth.jsonl").read_text().splitlines()
            if '"request_id"' in line
        ),
        key=lambda r: r["arrival_ns"],
    )
    sent = Counter((r["prompt_tokens"], r["completion_tokens"]) for r in records)
    assert sent == Counter((r.input_tokens, r.output_tokens) for r in expected)
    # on the trace's clock: none early, each at most 100 ms late (the first also connects)
    times_s = sorted(r.t_s for r in expected)
    lateness = [r["arrival_ns"] / 1e9 - t for r, t in zip(records, times_s, strict=True)]
    start = min(lateness)  # the run's time 0, as the least late request shows it
    assert all(0 <= late - start < 0.1 for late in lateness), (lateness, times_s)


def test_a_burstgpt_traces_models_map_onto_the_served_models(tmp_path: Path) -> None:
    """A class per trace ``Model``, each with its own served model (scenarios/README.md):
    each model's rows arrive at the simulator under that model, and are reported per model."""
    trace = ROOT / "scenarios" / "traces" / SAMPLES["burstgpt"]
    rows = {
        source: len(load_trace_spec(TraceSpec(file=str(trace), model=source))[1])
        for source in ("ChatGPT", "GPT-4")
    }
    scenario = tmp_path / "models.yaml"
    scenario.write_text(
        "name: burstgpt-models\nduration: 6s\nclasses:\n"
        f"  chatgpt:\n    trace: {{file: {trace}, model: ChatGPT}}\n    model: llama-8b\n"
        f"  gpt4:\n    trace: {{file: {trace}, model: GPT-4}}\n    model: llama-70b\n"
        "simulator: {ttft_ms: 5, gap_ms: 1}\n"
    )
    out = tmp_path / "out"
    summary, _ = run_scenario(scenario, out)
    records = [
        json.loads(line)
        for line in (out / "truth.jsonl").read_text().splitlines()
        if '"request_id"' in line
    ]
    arrived = Counter(record["model"] for record in records)
    assert arrived == {"llama-8b": rows["ChatGPT"], "llama-70b": rows["GPT-4"]}, arrived
    reported = {name: part["requests"]["ok"] for name, part in summary["models"].items()}
    assert reported == arrived
