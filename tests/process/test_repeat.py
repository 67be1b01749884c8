"""``run --repeat N``: a series of seeded runs, each a whole run of its own, and how far apart
they land beside each run's own 95 % intervals; ``compare`` judges two of them by their
intervals."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml

from tests.conftest import run_command


def test_a_series_of_runs_and_how_far_apart_they_land(tmp_path: Path) -> None:
    out = tmp_path / "series"
    args = ["run", "scenarios/quickstart.yaml", "--run-time", "6s", "--repeat", "2"]
    result = run_command([sys.executable, "-m", "tpot_locust", *args, "--out", str(out)], 240)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    seeds, counts, rates = [], [], []
    for index in (1, 2):
        folder = out / f"run-{index}"
        summary = json.loads((folder / "summary.json").read_text())
        tpot = summary["metrics"]["tpot"]
        low, high = tpot["ci95"]["p50"]
        assert low <= tpot["p50"] <= high and high - low < tpot["p50"]  # a real interval
        assert (
            tpot["ci95"]["p99.99"] is None and "not measured" in tpot["ci95_not_measured"]["p99.99"]
        )
        seeds.append(yaml.safe_load((folder / "scenario.yaml").read_text()).get("seed"))
        counts.append(tpot["count"])
        rates.append(summary["tokens"]["per_s"])
    assert seeds == [1, 2], seeds  # fresh seeds, the scenario's first
    figures = json.loads((out / "repeats.json").read_text())
    p50 = figures["metrics"]["tpot"]["p50"]
    assert len(p50["values"]) == 2 and p50["min"] <= p50["median"] <= p50["max"]
    # two runs' p50 in one HDR bucket make the interval a point (seen once: 1.277 both)
    assert p50["across_runs"][0] <= p50["median"] <= p50["across_runs"][1]
    assert p50["pooled_ci95"][0] <= p50["pooled"] <= p50["pooled_ci95"][1]
    assert "runs of the scenario (fresh seeds)" in result.stdout
    # the series as one run: every run's histograms merged, reported again by `report`
    merged = json.loads((out / "summary.json").read_text())
    assert merged["metrics"]["tpot"]["count"] == sum(counts)
    # rates over the runs' windows end to end, not over the time between them too
    assert abs(merged["tokens"]["per_s"] / (sum(rates) / 2) - 1) < 0.1, (merged["tokens"], rates)
    assert merged["metrics"]["tpot"]["p50"] is not None and "ci95" not in merged["metrics"]["tpot"]
    assert (out / "report.html").is_file() and (out / "report.txt").is_file()
    again = run_command([sys.executable, "-m", "tpot_locust", "report", str(out), "--json"], 60)
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["metrics"]["tpot"]["count"] == sum(counts)
    compared = run_command(
        [sys.executable, "-m", "tpot_locust", "compare", str(out / "run-1"), str(out / "run-2")]
        + ["--metrics", "tpot", "--percentiles", "p50,p90", "--json"],
        60,
    )
    assert compared.returncode == 0, compared.stdout + compared.stderr  # A/A: no regression
    rows = json.loads(compared.stdout)["rows"]
    assert {row["verdict"] for row in rows} <= {"within", "inconclusive", "improved"}
    assert all(row["ci95"] is not None for row in rows)
