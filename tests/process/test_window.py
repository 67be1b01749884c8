"""Every token in the window counts (issue 42): gaps measured by when they arrive, not by
whether their request fit inside the run; checked against the simulator's truth of the
whole window (every request, finished or cut)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.conftest import ROOT, run_command
from tests.helpers.scripted_server import (
    DONE,
    FINISH,
    Script,
    request,
    scripted_server,
    sse_head,
    token,
)
from tests.process.test_tail_truth import _run  # a scenario of tests/scenarios, run
from tpot_locust.metrics.recorder import Recorder
from tpot_locust.wire.http_client import HTTPConnection, Origin
from tpot_locust.wire.streaming import stream_request

# The bounds: the window's gaps nearly all measured, ITL within 0.5 ms of the truth.
MIN_COVERAGE = 0.97
ITL_TOLERANCE_MS = 0.5
PROGRESS = re.compile(r"^\[\s*(\d+)s / \d+s\].*?(TPOT -|TPOT p50)", re.MULTILINE)


def assert_window_true(summary: dict) -> None:
    """The window's gaps measured, and ITL p50/p90/p99 at the truth of the whole window."""
    check = summary["truth_check"]
    coverage = check["coverage"]
    assert coverage["share"] >= MIN_COVERAGE and coverage["agrees"], coverage
    for key in ("p50", "p90", "p99"):
        row = check["metrics"]["itl"][key]
        assert abs(row["error"]) <= ITL_TOLERANCE_MS, (key, row)


@pytest.mark.parametrize("workers", [0, 2])
def test_answers_longer_than_the_run_are_measured(
    tmp_path: Path, python: str, workers: int
) -> None:
    """Distributed, each worker ships each gap once: the master's count is the truth's."""
    summary, stdout = _run(tmp_path, python, "window_long_answers.yaml", f"--workers={workers}")
    # no request fit: before, "nothing was measured" and exit 3
    assert summary["requests"]["ok"] == 0 and summary["metrics"]["e2e"]["count"] == 0
    assert summary["window"]["cut"]["stop"] == 16, summary["window"]
    assert summary["metrics"]["ttft"]["count"] == 0  # every request was sent in the warm-up
    assert summary["window"]["gaps"] >= 16 * 15 * 10  # 16 s of 16 streams at ~20 gaps/s
    assert summary["window"]["gaps_after"] > 0  # the 2 s drain: counted apart
    assert_window_true(summary)
    assert "streams cut mid-answer 16 (16 by the stop)" in stdout
    # live: every progress line after the warm-up's first interval shows TPOT
    lines = [(int(t), shown) for t, shown in PROGRESS.findall(stdout)]
    inside = [shown for t, shown in lines if 5 <= t <= 19]  # first gaps at 4 s: the next line
    assert inside and all(shown == "TPOT p50" for shown in inside), lines


def test_bursts_with_long_answers_keep_the_slowed_streams(tmp_path: Path, python: str) -> None:
    """The streams a burst slowed are those still going at the stop: their gaps count."""
    summary, _ = _run(tmp_path, python, "window_bursts.yaml")
    assert summary["window"]["cut"]["stop"] >= 8, summary["window"]
    assert_window_true(summary)
    phases = summary["interference"]["phases"]
    assert phases["burst"]["itl"]["count"] > 0 and phases["steady"]["itl"]["count"] > 0


def test_a_stall_past_the_idle_timeout_keeps_the_gaps_before_it() -> None:
    """A stream that stalls mid-answer past its idle timeout: its gaps before the stall are
    in the histograms, the request fails as ``timeout_idle``, and the stall shows as a
    censored gap (at least the timeout), never as a sample."""
    steps = [(0.0, sse_head())] + [(0.01 * (k + 1), token("x")) for k in range(10)]
    steps += [(8.0, FINISH + DONE)]  # far past the 1.5 s idle timeout (wide of a busy CPU)
    with scripted_server([Script(steps)]) as url:
        connection = HTTPConnection(Origin.parse(url))
        timings, _ = stream_request(connection, request(idle_timeout=1.5))
        connection.close()
    assert timings.error_category == "timeout_idle" and len(timings.token_stamps) == 10
    recorder = Recorder()
    recorder.record(timings)
    chat = recorder.take_interval(final=True).classes["Test"]
    assert chat.histograms["itl"].total_count == 9 and chat.histograms["ttft"].total_count == 1
    assert chat.histograms["itl"].get_max_value() < 200_000  # us: the stall is no sample
    counters = chat.counters
    assert counters.failed == 1 and counters.errors["timeout_idle"] == 1
    assert counters.cut_by_timeout == 1 and counters.censored_gaps == 1
    assert counters.censored_gap_ns_max >= 1.5e9
    assert "e2e" not in chat.histograms


def test_a_reasoning_model_longer_than_the_run(tmp_path: Path, python: str) -> None:
    """scenarios/reasoning.yaml, shortened: thinking first, answers longer than the run; the
    window's tokens split into reasoning and answer, TTFAT of the answers that began."""
    out = tmp_path / "out"
    result = run_command(
        [
            python,
            "-m",
            "tpot_locust",
            "run",
            str(ROOT / "scenarios/reasoning.yaml"),
            "--out",
            str(out),
            "--run-time",
            "20s",
            "--stop-timeout",
            "0s",
            "--set",
            "warmup=3s",
            "--set",
            "simulator.reasoning_tokens={dist: uniform, min: 300, max: 600}",
        ],
        timeout=240,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["requests"]["ok"] == 0 and summary["window"]["cut"]["stop"] == 16
    tokens = summary["tokens"]
    assert tokens["window_reasoning"] > 0 and tokens["window_answer"] > 0, tokens
    assert summary["metrics"]["ttfat"]["count"] > 0
    assert summary["metrics"]["ttfat"]["p50"] > summary["metrics"]["ttft"]["p50"] + 4000  # ms
    assert_window_true(summary)
    full = (out / "report.txt").read_text()  # the full report
    assert "in the window: reasoning tokens" in full
    assert "TTFAT: send -> first answer token event" in full
