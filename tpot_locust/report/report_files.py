"""``report.html`` and ``report.txt`` of a finished run: each made from the summary as the
finishing pass left it (``report.finishing``, which runs each in its own guard) and written;
and the scenario as the page embeds it (``shown_scenario``, ``tpot-locust report``'s too).
"""

from __future__ import annotations

from pathlib import Path

import yaml

from tpot_locust.common.bounded_files import BoundedFileError, read_text
from tpot_locust.common.results_files import write_file
from tpot_locust.common.results_folder import ResultsFolder
from tpot_locust.common.run_facts import NO_FACTS
from tpot_locust.common.secrets import redact_mapping
from tpot_locust.metrics.metric_set import MetricSet
from tpot_locust.report.html import RunView, render_report
from tpot_locust.report.summary import format_full_report
from tpot_locust.report.summary_types import Summary, Verdict
from tpot_locust.report.verdict_files import format_verdict
from tpot_locust.scenario.yaml_source import MAX_SOURCE_BYTES, ScenarioError, parse_located


def write_page(folder: ResultsFolder, summary: Summary, totals: MetricSet) -> None:
    """``report.html``: the run's page, with the scenario as run at its end."""
    name = summary.get("run", NO_FACTS).scenario or folder.root.name
    scenario = shown_scenario(folder.scenario)
    write_file(folder.report, render_report([RunView(name, summary, totals, scenario)]))


def write_text(
    folder: ResultsFolder, summary: Summary, check_lines: list[str], verdict: Verdict | None
) -> None:
    """``report.txt``: the full terminal report (``full_text``)."""
    write_file(folder.report_text, full_text(summary, check_lines, verdict))


def full_text(summary: Summary, check_lines: list[str], verdict: Verdict | None) -> str:
    """The full terminal report (every table, every class) with the checks' lines and the
    verdict: ``report.txt``, and the terminal's with ``--report full``."""
    parts = [format_full_report(summary)]
    if check_lines:
        parts.append("\n".join(check_lines))
    if verdict is not None:
        parts.append("\n".join(format_verdict(verdict, full=True)))
    return "\n\n".join(parts) + "\n"


def shown_scenario(path: Path) -> str | None:
    """The scenario as ``report.html`` embeds it: a regular file of the folder (a link in its
    place is not followed: a planted one embedded a private key), parsed with the scenario's
    own bounds, and its secrets redacted again (a hand-placed one's as well as ours); None
    where there is no such file or it does not parse."""
    try:
        text = read_text(path, MAX_SOURCE_BYTES, follow_links=False)
        document = parse_located(text, str(path)).data
    except (OSError, BoundedFileError, ScenarioError):
        return None
    # our own header ("# PATH as run; set on the command line: KEYS") and no other comment:
    # a hand-placed file's may hold what a key would (# token: sk-...)
    first = text.split("\n", 1)[0]
    header = [first] if first.startswith("# ") and " as run" in first else []
    shown = yaml.safe_dump(redact_mapping(document), sort_keys=False)
    return "\n".join([*header, shown])
