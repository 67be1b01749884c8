"""The end of a run, once: build the summary, check it against the simulator's truth, gate
it, and write each results file a single time, after every input is in.

One process runs it (``common.results_folder`` says which): the Locust master, or local
runner, when Locust is run directly; ``tpot-locust run`` when it supervises Locust, since
only it has the simulator's truth (its Locust master then saves its ``histograms.json`` and
nothing more). Each step runs in its own guard: one that fails is named in the summary's
``report_error`` (``complete: false``, exit 3) and every other file is still written.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from tpot_locust.common.results_folder import (
    REPORT_FILE,
    REPORT_TEXT_FILE,
    SUMMARY_FILE,
    ResultsFolder,
)
from tpot_locust.common.run_facts import RunFacts
from tpot_locust.metrics.metric_set import MetricSet
from tpot_locust.report.gate import EXIT_INVALID, evaluate
from tpot_locust.report.histograms_file import load_results, write_histograms
from tpot_locust.report.recovery import recovered_results
from tpot_locust.report.report_files import write_page, write_text
from tpot_locust.report.run_intervals import add_intervals
from tpot_locust.report.simulator_checks import checked_attribution, checked_truth
from tpot_locust.report.strict_json import json_safe, write_json
from tpot_locust.report.summary import build_summary
from tpot_locust.report.summary_types import Summary, Verdict
from tpot_locust.report.verdict_files import write_verdict
from tpot_locust.scenario.slo import SloSpec

SLO_KEY: Final = "slo"  # the verdict's place in summary.json (Final: a TypedDict key)
# Set by ``tpot-locust run`` for its Locust processes: their master saves histograms.json
# only, and the finishing pass (truth check, verdict, printed last) runs in the supervisor.
logger = logging.getLogger(__name__)


@dataclass
class Finished:
    """What the finishing pass made: the summary as written, the verdict, the truth check's
    printed lines and whether it passed (None: no tolerance, or no truth)."""

    summary: Summary
    verdict: Verdict | None = None
    truth_passed: bool | None = None
    check_lines: list[str] = field(default_factory=list)
    # parts that failed after the verdict was made (writing a file): the run cannot vouch
    late_errors: list[str] = field(default_factory=list)

    def exit_code(self, otherwise: int | None = 0) -> int | None:
        """The verdict's code; else 3 when the truth check failed or a part is missing;
        else ``otherwise`` (Locust's own, or what the run set before)."""
        if self.late_errors:
            return EXIT_INVALID
        if self.verdict is not None:
            return int(self.verdict["exit_code"])
        if self.truth_passed is False or self.summary.get("report_error"):
            return EXIT_INVALID
        return otherwise


def finish_run(
    folder: ResultsFolder | None,
    totals: MetricSet,
    run: RunFacts,
    *,
    slo: SloSpec | None = None,
    suite: str = "run",
    truth_tolerance_ms: float | None = None,
    check_truth: bool = False,
    save_histograms: bool = True,
    summary: Summary | None = None,
) -> Finished:
    """The one finishing pass. ``check_truth``: compare with ``folder.truth`` (the embedded
    simulator's); ``save_histograms=False`` where ``histograms.json`` is already the input;
    ``summary``: one already built (a remote master's), else built from ``totals`` and ``run``.

    Files are written in an order that keeps the folder honest: ``histograms.json`` first
    (all a later ``tpot-locust report`` needs), ``summary.json`` last (a folder with one is
    finished)."""
    errors: list[str] = []
    if folder is not None and save_histograms:
        saving = lambda: write_histograms(folder, totals, run)  # noqa: E731
        errors += guarded(errors, "histograms", saving) or []
    if summary is None:
        summary = build_summary(totals, run, errors)
    elif errors:
        _note(summary, errors)
    built = summary
    if folder is not None:  # each percentile's interval, from the run's time slices
        guarded(errors, "intervals", lambda: add_intervals(built, folder))
    finished = Finished(summary)
    if folder is not None and check_truth and folder.truth.exists():
        _check_truth(finished, folder, truth_tolerance_ms, errors)
    written: list[str] = []  # numbers JSON cannot hold: null from here on, and said
    finished.summary = summary = json_safe(summary, "", written)
    _note(summary, errors + written)
    if slo is not None and not slo.empty:
        verdict = guarded(errors, "verdict", lambda: evaluate(slo, summary, baseline_summary(slo)))
        if verdict is not None:
            finished.verdict = summary[SLO_KEY] = verdict
        _note(summary, errors)
    if folder is None:
        return finished
    late = finished.late_errors
    if (verdict := finished.verdict) is not None:
        guarded(late, "verdict files", lambda: write_verdict(folder, verdict, suite))
    guarded(late, REPORT_FILE, lambda: write_page(folder, summary, totals))
    guarded(
        late,
        REPORT_TEXT_FILE,
        lambda: write_text(folder, summary, finished.check_lines, finished.verdict),
    )
    _note(summary, late)
    guarded(late, SUMMARY_FILE, lambda: write_json(folder.summary, summary))
    return finished


def finish_saved(folder: ResultsFolder, **options: Any) -> Finished:
    """The finishing pass of a folder whose ``histograms.json`` a Locust master saved
    (``tpot-locust run``); ``options`` as ``finish_run``'s. Where the master died before
    saving it, the workers' records make it (``report.recovery``), written here: the folder
    is whole again, marked incomplete."""
    try:
        totals, run = load_results(folder.root)
    except FileNotFoundError:
        totals, run = recovered_results(folder, options.get("suite"))
        return finish_run(folder, totals, run, **options)
    return finish_run(folder, totals, run, save_histograms=False, **options)


def saved_summary(out_dir: Path) -> Summary:
    """The summary of a run's folder as its saved histograms and interval logs make it (no
    truth check: ``report`` and ``compare`` read a folder as it was left)."""
    totals, run = load_results(out_dir)
    summary = build_summary(totals, run)
    add_intervals(summary, ResultsFolder.of(out_dir))
    return summary


def baseline_summary(spec: SloSpec) -> Summary | None:
    """The summary of the scenario's baseline run (from its saved histograms), or None."""
    if spec.baseline is None:
        return None
    try:
        return saved_summary(Path(spec.baseline.results))
    except (OSError, ValueError, KeyError):
        return None


def _check_truth(
    finished: Finished, folder: ResultsFolder, tolerance_ms: float | None, errors: list[str]
) -> None:
    """The truth check and the attribution check, into the summary and the printed lines."""
    summary = finished.summary
    truth = guarded(errors, "truth check", lambda: checked_truth(summary, folder, tolerance_ms))
    if truth is not None:
        check, lines = truth
        summary["truth_check"] = check
        finished.truth_passed = check["passed"]
        finished.check_lines += lines
    attribution = guarded(errors, "attribution check", lambda: checked_attribution(summary, folder))
    if attribution is not None:
        summary["attribution_check"], lines = attribution
        finished.check_lines += lines


def _note(summary: Summary, errors: list[str]) -> None:
    """A part that failed: the summary says which, and that it cannot vouch for the run."""
    if not errors:
        return
    known = summary["report_error"].split("; ") if summary.get("report_error") else []
    summary["report_error"] = "; ".join(dict.fromkeys(known + errors))
    summary["complete"] = False


def guarded(errors: list[str], part: str, step: Callable[[], Any]) -> Any:
    """``step()``, or None with the failure logged and named in ``errors``: one step of the
    end of a run that fails must not keep the others from writing what they can."""
    try:
        return step()
    except Exception as error:  # the end of a run must write what it can
        logger.error("tpot-locust: %s failed at the end of the run: %s", part, error)
        logger.debug("the failure of %s", part, exc_info=True)
        errors.append(f"{part}: {type(error).__name__}: {error}")
        return None
