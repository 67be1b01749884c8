"""A cluster test's results saved as a local sweep step's are (``tpot-locust report`` and
``compare`` read the folder): the master's summary, its histograms while the master still
has this test's, gated here through the one finishing pass."""

from __future__ import annotations

import sys

from tpot_locust.cli.master_api import MasterAPI, MasterError
from tpot_locust.common.results_folder import ResultsFolder
from tpot_locust.common.run_facts import NO_FACTS
from tpot_locust.metrics.metric_set import MetricSet
from tpot_locust.report.finishing import finish_run
from tpot_locust.report.histograms_file import load_results
from tpot_locust.report.strict_json import write_json
from tpot_locust.report.summary_types import Summary, Verdict
from tpot_locust.report.verdict_files import format_verdict
from tpot_locust.scenario.model import Scenario


def save_step(
    api: MasterAPI, folder: ResultsFolder, test: int, summary: Summary | None, scenario: Scenario
) -> Verdict | None:
    """The step's results as a local step has them (``tpot-locust report`` and
    ``compare`` read the folder), through the one finishing pass: the master's summary,
    gated here, and its histograms while the master still has this test's."""
    if summary is None:
        return None
    summary.pop("running", None)  # the web UI's, not the run's
    summary.pop("test", None)
    totals, run = MetricSet(), summary.get("run", NO_FACTS)
    try:
        document = api.histograms()
        if document.pop("test", None) == test:
            write_json(folder.histograms, document)
            totals, run = load_results(folder.root)  # checked as any saved file is
        else:
            print(
                f"tpot-locust sweep: the master moved on from test {test}: no "
                f"histograms in {folder.root}",
                flush=True,
            )
    except (MasterError, OSError, ValueError) as error:
        # the step's summary and verdict are still written; it cannot vouch for itself
        why = f"histograms: {error}"
        print(f"tpot-locust sweep: {why}", file=sys.stderr, flush=True)
        known = summary.get("report_error")
        summary["report_error"] = f"{known}; {why}" if known else why
        summary["complete"] = False
    finished = finish_run(
        folder,
        totals,
        run,
        slo=scenario.slo,
        suite=scenario.name,
        save_histograms=False,
        summary=summary,
    )
    if finished.verdict is not None:
        print("\n".join(format_verdict(finished.verdict, sweep_step=True)), flush=True)
    return finished.verdict
