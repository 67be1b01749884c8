"""Trace replay: requests sent at their trace times with their lengths, split whole across
workers."""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

import pytest

from tests.conftest import run_command, truth_requests

REQUESTS = 200


def trace_scenario(tmp_path: Path) -> tuple[Path, Counter]:
    lines, lengths = [], Counter()
    for i in range(REQUESTS):  # every 50 ms for 10 s, each with its own lengths
        inputs, outputs = 10 + i % 50, 8 + i % 7
        lines.append(json.dumps({"t": i * 0.05, "input_tokens": inputs, "output_tokens": outputs}))
        lengths[(inputs, outputs)] += 1
    (tmp_path / "trace.jsonl").write_text("\n".join(lines) + "\n")
    scenario = tmp_path / "trace.yaml"
    scenario.write_text(
        "name: trace\nduration: 12s\nclasses:\n  replay:\n    trace: trace.jsonl\n"
        "simulator: {ttft_ms: 5, gap_ms: 1}\n"
    )
    return scenario, lengths


@pytest.mark.parametrize("workers", [0, 2])
def test_a_trace_is_sent_on_time_with_its_lengths(tmp_path: Path, workers: int) -> None:
    scenario, lengths = trace_scenario(tmp_path)
    out = tmp_path / "out"
    result = run_command(
        [
            sys.executable,
            "-m",
            "tpot_locust",
            "run",
            str(scenario),
            "--out",
            str(out),
            "--workers",
            str(workers),
        ],
        timeout=120,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["requests"]["ok"] == REQUESTS and summary["requests"]["failed"] == 0
    lag = summary["metrics"]["schedule_lag"]
    assert lag["count"] == REQUESTS
    if workers == 0:
        # ms behind the trace's times: a late dispatcher is 100s of ms late for most sends.
        # The median says that; the p99 (the 2nd latest of 200) is one scheduler hiccup on 2
        # busy cores (CI read 8.8 and 14.2 with p50 1.1), so it is bounded wide of them.
        assert lag["p50"] < 5.0 and lag["p99"] < 50.0, lag
    sent = Counter()
    for line in (out / "truth.jsonl").read_text().splitlines():
        record = json.loads(line)
        if "request_id" in record and not record.get("aborted"):
            sent[(record["prompt_tokens"], record["completion_tokens"])] += 1
    assert sent == lengths  # every request once, none lost or twice, each with its lengths


def test_a_traced_conversation_sends_the_answers_before_each_later_turn(tmp_path: Path) -> None:
    lines = [
        {"t": 0.0, "input_tokens": 5, "output_tokens": 4, "session": "s"},
        {"t": 0.2, "input_tokens": 3, "output_tokens": 6, "session": "s"},
        {"t": 0.4, "prompt": "one two", "output_tokens": 2, "session": "s"},
    ]
    (tmp_path / "trace.jsonl").write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    scenario = tmp_path / "trace.yaml"
    scenario.write_text(
        "name: talk\nduration: 3s\nclasses:\n  replay:\n    trace: trace.jsonl\n"
        "simulator: {ttft_ms: 5, gap_ms: 1}\n"
    )
    out = tmp_path / "out"
    result = run_command(
        [sys.executable, "-m", "tpot_locust", "run", str(scenario), "--out", str(out)], timeout=60
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    sent = truth_requests(out)
    # each turn carries the conversation so far: the answers are the simulator's words
    assert [(r["prompt_tokens"], r["completion_tokens"]) for r in sent] == [
        (5, 4),
        (5 + 4 + 3, 6),
        (12 + 6 + 2, 2),
    ]
