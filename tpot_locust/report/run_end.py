"""What a Locust process saves and prints when its test ends, once the harness has its
totals and facts (``harness.run.test_end``): kept here, beside the finishing pass it calls,
so the harness holds no report of its own.

Two ends: under ``tpot-locust run`` the process hands ``histograms.json`` to its supervisor,
which finishes the run with the simulator's truth (``hand_over``); else it finishes here
(``finish_here``) and, for a web-UI test, prints its report now (``print_test_report``).
"""

from __future__ import annotations

import sys
from dataclasses import replace

from tpot_locust.common.results_folder import ResultsFolder
from tpot_locust.common.run_facts import RunFacts
from tpot_locust.metrics.metric_set import MetricSet
from tpot_locust.report.finishing import Finished, finish_run, guarded
from tpot_locust.report.first_screen import first_screen
from tpot_locust.report.gate import EXIT_INVALID
from tpot_locust.report.histograms_file import write_histograms
from tpot_locust.report.summary import format_full_report
from tpot_locust.report.summary_types import Summary, Verdict
from tpot_locust.report.verdict_files import format_verdict
from tpot_locust.scenario.slo import SloSpec


def hand_over(
    folder: ResultsFolder,
    totals: MetricSet,
    run: RunFacts,
    errors: list[str],
    missing_workers: bool,
) -> int | None:
    """Save ``histograms.json`` for the supervisor; the exit code the process must end with
    (3: a part failed or nothing could be saved; 1: workers went missing; None: its own).
    A folder left without the file (a full disk) has the figures printed here instead."""
    saving = lambda: write_histograms(folder, totals, run)  # noqa: E731
    code = EXIT_INVALID if guarded(errors, "histograms", saving) or errors else None
    if code is None and missing_workers:
        code = 1
    if not folder.histograms.exists():
        print_unsaved(totals, run, errors)
    return code


def print_unsaved(totals: MetricSet, run: RunFacts, errors: list[str]) -> None:
    """The run's figures on the terminal where its results could not be saved (a full
    disk): what was measured is not lost with the files."""
    unsaved = "; ".join(errors) or "histograms.json is missing"
    finished = finish_run(None, totals, replace(run, report_error=unsaved))
    print("\n" + format_full_report(finished.summary), flush=True)
    print(f"tpot-locust: the results could not be saved: {unsaved}", file=sys.stderr)


def finish_here(
    folder: ResultsFolder | None, totals: MetricSet, run: RunFacts, slo: SloSpec | None
) -> Finished:
    """The finishing pass in this process (no supervisor), saying on stderr when the
    report is incomplete."""
    finished = finish_run(folder, totals, run, slo=slo, suite=run.scenario or "run")
    if report_error := finished.summary.get("report_error"):
        print(f"tpot-locust: the report is incomplete: {report_error}", file=sys.stderr, flush=True)
    return finished


def print_test_report(
    summary: Summary, folder: ResultsFolder | None, verdict: Verdict | None
) -> None:
    """The end-of-test report's first screen and the SLO verdict (a test with no request
    shows the verdict only)."""
    requests = summary["requests"]
    if requests["ok"] or requests["failed"] or requests["interrupted"]:
        text = folder.report_text if folder is not None else None
        html = folder.report if folder is not None else None
        screen = first_screen(
            summary,
            text if text and text.exists() else None,
            html if html and html.exists() else None,
        )
        print("\n" + "\n".join(screen), flush=True)
    if verdict is not None:
        print("\n" + "\n".join(format_verdict(verdict)), flush=True)
