"""Measured timings against the simulator's ground truth, through a real Locust run."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from tests.conftest import ROOT, run_command
from tpot_locust.common.clock import SEGMENT_CLOCK
from tpot_locust.metrics.histograms import count_below
from tpot_locust.report.histograms_file import load_results
from tpot_locust.sim.process import start_simulator
from tpot_locust.wire.segment_stamps import arrival_clock


def test_tpot_matches_ground_truth_at_2ms_gap_8_streams(tmp_path: Path, python: str) -> None:
    truth_path = tmp_path / "truth.jsonl"
    out = tmp_path / "out"
    with start_simulator("--gap-ms", "2", "--ttft-ms", "20", truth=truth_path) as sim:
        result = run_command(
            [
                python,
                "-m",
                "locust",
                "-f",
                str(ROOT / "tests/helpers/locust_accuracy.py"),
                "--headless",
                "-u",
                "8",
                "-r",
                "8",
                "-t",
                "4s",
                "--host",
                sim.url,
                "--tpot-out",
                str(out),
                "--only-summary",
            ],
            timeout=120,
        )
    assert result.returncode == 0, result.stdout + result.stderr
    truth = [json.loads(line) for line in truth_path.read_text().splitlines()]
    finished = [entry for entry in truth if not entry.get("aborted")]
    assert len(finished) == 8
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["requests"]["ok"], summary["requests"]["failed"]) == (8, 0)
    # every request's output count equals the truth
    assert summary["tokens"]["output"] == sum(len(e["send_ns"]) for e in finished) == 8 * 200
    assert summary["tokens"]["estimated"] is False
    assert summary["run"]["arrival_clock"] == arrival_clock()  # this machine's best
    assert summary["client"]["arrival_clocks"] == {arrival_clock(): 8}
    # on the segment clock every send is its departure seen by the tap
    assert summary["client"]["departed_from_tap"] == (8 if arrival_clock() == SEGMENT_CLOCK else 0)
    true_gaps_ms = np.concatenate([np.diff(e["send_ns"]) for e in finished]) / 1e6
    tpot = summary["metrics"]["tpot"]
    assert tpot["count"] == true_gaps_ms.size == 8 * 199
    assert abs(tpot["p50"] - float(np.median(true_gaps_ms))) <= 0.3, (tpot, np.median(true_gaps_ms))
    totals, _ = load_results(out)
    assert totals.combined().histogram("tpot").total_count == tpot["count"]
    # no more than 2 % of gaps stamped together (< 0.5 ms) by the client. The simulator's
    # timer can itself send two tokens < 0.5 ms apart when its loop wakes late (its truth
    # shows those): only the excess over the truth is the client's doing.
    itl = totals.combined().histogram("itl")
    true_close = int(np.count_nonzero(true_gaps_ms < 0.5))
    client_close = count_below(itl, 500) - true_close
    assert client_close <= 0.02 * itl.total_count, (count_below(itl, 500), true_close)
