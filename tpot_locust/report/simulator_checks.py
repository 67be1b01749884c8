"""A run's figures against the embedded simulator's truth, each check made and put in
words at once: the truth check (our percentiles against the true ones) and the attribution
check (our causes of the tail against the simulator's steps). The finishing pass runs each
in its own guard (``report.finishing``): one that fails leaves the other."""

from __future__ import annotations

from tpot_locust.common.results_folder import ResultsFolder
from tpot_locust.report.attribution_check import attribution_check, format_attribution_check
from tpot_locust.report.summary_types import AttributionCheck, Summary, TruthCheck
from tpot_locust.report.truth_check import format_truth_check, load_stall_windows, truth_check


def checked_truth(
    summary: Summary, folder: ResultsFolder, tolerance_ms: float | None
) -> tuple[TruthCheck, list[str]]:
    """The truth check of ``summary`` against ``folder``'s truth, and its printed lines."""
    check = truth_check(summary, folder.truth, tolerance_ms, load_stall_windows(folder))
    return check, format_truth_check(check)


def checked_attribution(
    summary: Summary, folder: ResultsFolder
) -> tuple[AttributionCheck, list[str]]:
    """The attribution check of ``summary`` against ``folder``'s truth, and its lines."""
    check = attribution_check(summary, folder.truth)
    return check, format_attribution_check(check)
