"""Gate a finished run: evaluate its SLOs, write the verdict files, keep it in the summary.

Called by the Locust process that made the results (master or local runner) and, under
``tpot-locust run``, once more after the truth check has joined the summary.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tpot_locust.report.gate import evaluate
from tpot_locust.report.results_files import SUMMARY_FILE, load_results
from tpot_locust.report.summary import build_summary
from tpot_locust.report.verdict_files import write_verdict
from tpot_locust.scenario.slo import SloSpec

SLO_KEY = "slo"  # the verdict's place in summary.json
# Set by ``tpot-locust run`` for its Locust processes: it gates again after the truth check
# and prints the verdict itself.
SUPERVISED_ENV = "TPOT_SUPERVISED"


def baseline_summary(spec: SloSpec) -> dict[str, Any] | None:
    """The summary of the scenario's baseline run (from its saved histograms), or None."""
    if spec.baseline is None:
        return None
    try:
        totals, run = load_results(Path(spec.baseline.results))
    except (OSError, ValueError, KeyError):
        return None
    return build_summary(totals, run)


def gate_summary(
    spec: SloSpec, summary: dict[str, Any], out_dir: Path | None, suite: str
) -> dict[str, Any]:
    """The verdict of ``summary``; with ``out_dir``, also ``verdict.json``, ``junit.xml``,
    ``summary.md`` and the verdict inside ``summary.json``."""
    verdict = evaluate(spec, summary, baseline_summary(spec))
    summary[SLO_KEY] = verdict
    if out_dir is not None:
        write_verdict(out_dir, verdict, suite)
        path = out_dir / SUMMARY_FILE
        if path.exists():
            path.write_text(json.dumps(summary, indent=2) + "\n")
    return verdict
