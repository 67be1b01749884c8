"""``tpot-locust report`` and ``tpot-locust compare``: saved runs read back, their report
re-printed (text, JSON, or one HTML page with several runs overlaid), two runs compared.

Each command imports the report modules it needs when it runs."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from tpot_locust.common.results_folder import REPORT_FILE, ResultsFolder
from tpot_locust.common.run_facts import NO_FACTS, json_default

if TYPE_CHECKING:
    from tpot_locust.report.html import RunView


def show_report(args: argparse.Namespace) -> int:
    from tpot_locust.report.finishing import finish_saved, saved_summary
    from tpot_locust.report.saved_results import VERDICT, read_checked
    from tpot_locust.report.summary import format_full_report
    from tpot_locust.report.verdict_files import format_verdict

    if args.html:
        return _html_report(args)
    if len(args.out) > 1:
        raise ValueError("several results folders: only with --html (their runs overlaid)")
    args.out = args.out[0]
    folder = ResultsFolder.of(Path(args.out))
    if not folder.histograms.exists():  # a crash left it: rebuilt from what survived
        rebuilt = finish_saved(folder).summary.get("run", NO_FACTS).recovered
        print(f"tpot-locust: {folder.root}: {rebuilt or 'rebuilt'}", file=sys.stderr)
    summary = saved_summary(folder.root)
    verdict_path = folder.verdict
    verdict = read_checked(verdict_path, VERDICT) if verdict_path.exists() else None
    if args.json:
        document = summary | ({"slo": verdict} if verdict else {})
        print(json.dumps(document, indent=2, default=json_default))
    else:
        print(format_full_report(summary))
        if verdict is not None:
            print("\n" + "\n".join(format_verdict(verdict)))
    return 0


def _html_report(args: argparse.Namespace) -> int:
    from tpot_locust.report.html import write_html

    runs = [_run_view(Path(given)) for given in args.out]
    if args.output:
        target = Path(args.output)  # an existing folder: report.html inside it
    elif len(runs) == 1:
        target = ResultsFolder.of(Path(args.out[0])).report
    else:
        target = Path(REPORT_FILE)
    print(write_html(target, runs))
    return 0


# What a saved summary.json adds to the summary rebuilt from its histograms (``_run_view``).
_SavedPart = Literal["slo", "truth_check", "attribution_check", "report_error"]


def _run_view(given: Path) -> RunView:
    """One saved run for the HTML report: its summary rebuilt from the histograms, with the
    verdict and truth check its ``summary.json`` gained at the end, and its scenario."""
    from tpot_locust.report.histograms_file import load_results
    from tpot_locust.report.html import RunView
    from tpot_locust.report.report_files import shown_scenario
    from tpot_locust.report.run_intervals import add_intervals
    from tpot_locust.report.saved_results import SUMMARY_EXTRAS, read_checked
    from tpot_locust.report.summary import build_summary

    folder = ResultsFolder.of(given)
    totals, run = load_results(folder.root)  # read once: the summary and the page's curves
    summary = build_summary(totals, run)
    add_intervals(summary, folder)
    saved = folder.summary
    if saved.exists():
        extras = read_checked(saved, SUMMARY_EXTRAS)
        kept: tuple[_SavedPart, ...] = ("slo", "truth_check", "attribution_check", "report_error")
        for key in kept:
            if extras.get(key) is not None:
                summary[key] = extras[key]
        if extras.get("complete") is False:
            summary["complete"] = False
    # a link there is not followed, a hand-placed scenario's secrets redacted
    return RunView(
        run.scenario or folder.root.name, summary, totals, shown_scenario(folder.scenario)
    )


def compare_runs(args: argparse.Namespace) -> int:
    from tpot_locust.report import compare
    from tpot_locust.report.finishing import saved_summary

    metrics = compare.parse_choices(
        args.metrics, compare.LATENCY_METRICS, compare.DEFAULT_METRICS, "metrics"
    )
    statistics = compare.parse_choices(
        args.percentiles, compare.STATISTICS, compare.DEFAULT_STATISTICS, "percentiles"
    )
    threshold = compare.parse_regression(args.max_regression)
    base, candidate = (saved_summary(Path(folder)) for folder in (args.base, args.candidate))
    result = compare.compare_summaries(base, candidate, metrics, statistics, threshold)
    if args.json:
        print(compare.format_json(result))
    elif args.markdown:
        print(compare.format_markdown(result))
    else:
        print(compare.format_table(result))
    return result.exit_code
