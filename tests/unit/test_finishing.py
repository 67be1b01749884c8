"""The finishing pass over a folder its Locust master saved (``tpot-locust run``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tpot_locust.common.results_folder import ResultsFolder
from tpot_locust.common.run_facts import RunFacts
from tpot_locust.metrics.histograms import record_many
from tpot_locust.metrics.metric_set import MetricSet
from tpot_locust.report.finishing import finish_saved
from tpot_locust.report.histograms_file import write_histograms
from tpot_locust.scenario.loader import load_scenario


def test_what_the_master_could_not_save_makes_the_gated_run_invalid(tmp_path: Path) -> None:
    """A number JSON cannot hold in the master's histograms.json (written as null) is named
    in the file's run facts, so the supervisor's summary is incomplete and the gate says
    invalid (exit 3), not pass."""
    scenario = tmp_path / "gate.yaml"
    scenario.write_text("name: g\nclasses: {chat: {users: 1}}\nslo: {tpot: {p50: 1s}}\n")
    totals = MetricSet()
    metrics = totals.for_group("chat")
    metrics.counters.ok = 50
    metrics.counters.first_send_wall_ns, metrics.counters.last_token_wall_ns = 1, 2_000_000_000
    record_many(metrics.histogram("tpot"), np.arange(1_000, 40_000, 3))
    folder = ResultsFolder(tmp_path / "out")
    problems = write_histograms(folder, totals, RunFacts(scenario="g", warmup_s=float("nan")))
    assert problems == ["run.warmup_s: nan written as null"]
    finished = finish_saved(folder, slo=load_scenario(scenario).slo, suite="g")
    assert finished.summary["complete"] is False
    assert "run.warmup_s: nan written as null" in finished.summary["report_error"]
    assert finished.verdict is not None and finished.exit_code(0) == 3
