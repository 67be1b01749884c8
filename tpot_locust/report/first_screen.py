"""The terminal's first screen: what a reader takes in at a glance, at the end of a run.

Why its own room: the full report (``summary.format_full_report``, every table of every
class, the truth and attribution checks) runs to ~150 lines; a reader wants the seed's
figures first, as k6's end-of-test summary or the seed report gives them: the verdict, the
TPOT table (mean, median, P90 ... P99.99, max, with tokens/s and samples above), a line each
for ITL, TTFT, E2E and throughput, the truth check and why the tail in a line or two, the
warnings that change how to read the numbers, and where the rest is. The full report goes
to ``report.txt`` in the results folder, and to the terminal with ``tpot-locust run
--report full``.

The whole end screen fits a terminal of ``WIDTH`` columns and ``HEIGHT`` lines, gated or
not: a gated run prints its verdict's table (``verdict_screen``, made here so both are held
to one budget) under the first screen, and the first screen leaves it room. Where the parts
do not all fit, the least telling go first (the worst gap's story, ITL when it is TPOT, E2E,
...; ``_RANKS``), and warnings left out are counted in a line of their own. A line too long
is wrapped between words, never between a value and its unit (``fit``).
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tpot_locust.common.metric_catalogue import E2E, ITL, TPOT, TTFT
from tpot_locust.common.percentiles import STATISTICS, Statistic
from tpot_locust.common.run_facts import NO_FACTS
from tpot_locust.common.text_safety import printable
from tpot_locust.metrics.causes import UNEXPLAINED
from tpot_locust.report.attribution import cause_title, gap_story, metric_tails, shares_of_100
from tpot_locust.report.gate import format_measured
from tpot_locust.report.metric_figures import format_metric
from tpot_locust.report.summary_types import (
    CheckRecord,
    MetricFigures,
    Summary,
    TruthCheck,
    Verdict,
)
from tpot_locust.report.terminal_report import format_report
from tpot_locust.report.truth_check import behind_warning, held_warning
from tpot_locust.report.window_figures import format_window, throughput

WIDTH = 100  # columns of every line
HEIGHT = 30  # lines of the whole end screen: this one, a blank line and the verdict's table
MARKS = {"pass": "PASS", "fail": "FAIL", "insufficient": "INSUFFICIENT", "invalid": "INVALID"}
_WARNING_OPENINGS = ("!", "RUN STOPPED", "REPORT INCOMPLETE", "INCOMPLETE RUN")
_ALARMS = ("RUN STOPPED", "REPORT INCOMPLETE", "INCOMPLETE RUN")  # kept before other warnings
_SHOWN_CAUSES = 3  # causes named in the "why the tail" line, the largest shares first
_SHOWN_ERRORS = 3  # error categories named in the requests line, the most first
_SHOWN_NAME = 40  # columns of the scenario's name in the verdict line
_WARNING_LINES = 2  # a warning's lines at most ("..." where it says more: report.txt has it)
_VERDICT_INDENT = 16  # where a check's text starts: "  INSUFFICIENT  "
# The verdict's table at most: the first screen's own parts that are never left out (the
# verdict line, requests, the TPOT table of 11, where the rest is: 15) and a blank line
# leave it this many of ``HEIGHT``.
VERDICT_LINES = 12
# A part's rank: kept before those of a larger rank where the screen cannot hold them all.
_RANKS = {
    "must": 0,  # the verdict line, requests, the TPOT table, where the rest is
    "alarm": 1,  # the run stopped early, the report is incomplete, a worker was lost
    "truth": 2,
    "workers": 2,  # a distributed run's workers reported in full, or not
    "ttft": 3,
    "why": 4,
    "warning": 5,
    "window": 6,  # interrupted, cut or waiting streams
    "e2e": 7,
    "itl": 8,
    "worst": 9,
}


@dataclass(eq=False)  # a part is itself: two warnings alike are two parts
class _Part:
    rank: int
    lines: list[str]


def first_screen(
    summary: Summary,
    full_report: Path | None = None,
    html_report: Path | None = None,
    sweep_step: bool = False,
) -> list[str]:
    """The first screen's lines (each at most ``WIDTH`` columns, at most ``HEIGHT`` with the
    verdict's table a gated run prints under them); ``sweep_step``: a sweep's step, whose
    verdict the sweep reads (not the run's pass or fail)."""
    verdict: Verdict | None = summary.get("slo")
    room = HEIGHT - (1 + _lines_of(verdict, sweep_step) if verdict else 0)
    must = _RANKS["must"]
    parts = [_Part(must, [_headline(summary, sweep_step)]), _Part(must, _requests(summary))]
    requests = summary["requests"]
    if (interrupted := requests.get("interrupted")) and (requests["ok"] or requests["failed"]):
        parts.append(
            _Part(
                _RANKS["window"],
                [
                    f"requests interrupted by the stop: {interrupted:,} (their gaps in the "
                    "window count; E2E counts finished requests)"
                ],
            )
        )
    if any((summary.get("window") or {}).get("cut", {}).values()):
        cut = [line for line in format_window(summary) if not line.startswith("gaps after")]
        parts += [_Part(_RANKS["window"], [line]) for line in cut]
    if workers := summary.get("workers"):
        full, seen = workers["reported_in_full"], workers["seen"]
        parts.append(_Part(_RANKS["workers"], [f"workers: {full} of {seen} reported in full"]))
    metrics = summary["metrics"]
    tpot = metrics.get(TPOT.name)
    if tpot and tpot["count"]:
        table = format_metric(TPOT.name, tpot)
        shown = [line for line in table if not line.lstrip().startswith("skew")]
        parts.append(_Part(must, ["", *shown]))
    else:
        parts.append(_Part(must, ["TPOT: no samples (no token gap arrived inside the window)"]))
    parts.append(_Part(_RANKS["itl"], [_itl_line(metrics.get(ITL.name), tpot)]))
    for metric, rank in ((TTFT, "ttft"), (E2E, "e2e")):
        if line := _compact(metric.short, metrics.get(metric.name)):
            parts.append(_Part(_RANKS[rank], [line]))
    parts.append(_Part(_RANKS["truth"], _readable(_truth_lines, summary)))
    why = _readable(_why_lines, summary)
    parts += [_Part(_RANKS["why"], why[:1]), _Part(_RANKS["worst"], why[1:])]
    for warning in _readable(_warnings, summary):
        alarm = warning.startswith(_ALARMS)
        told = fit(printable(warning))  # a server's long error: its first lines
        cut = told[:_WARNING_LINES]
        if len(told) > _WARNING_LINES:
            cut[-1] = cut[-1][: WIDTH - 4] + " ..."
        parts.append(_Part(_RANKS["alarm" if alarm else "warning"], cut))
    where = _where(full_report, html_report)
    rows = sum(-(-len(line) // WIDTH) for line in where)  # a long path: the terminal wraps it
    return _within(parts, room - rows) + where


def _lines_of(verdict: Verdict, sweep_step: bool) -> int:
    """The lines of the verdict's table printed under this screen (none where a saved
    summary's verdict cannot be read: then none is printed either)."""
    try:
        return len(verdict_screen(verdict, sweep_step))
    except (ValueError, TypeError, KeyError, AttributeError):
        return 0


def _within(parts: list[_Part], room: int) -> list[str]:
    """The parts' lines, each fitted to ``WIDTH``, in their order: every part of rank 0,
    then the others by rank while they fit in ``room`` lines; warnings left out counted."""
    for part in parts:
        part.lines = [wrapped for line in part.lines for wrapped in fit(printable(line))]
    kept = _chosen(parts, room)
    left_out = [p for p in parts if p.lines and p not in kept and p.rank == _RANKS["warning"]]
    if left_out:
        kept = _chosen(parts, room - 1)
        left_out = [p for p in parts if p.lines and p not in kept and p.rank == _RANKS["warning"]]
    lines = [line for part in parts if part in kept for line in part.lines]
    if left_out:
        more = len(left_out)
        lines.append(f"! {more} more warning{'s' * (more != 1)}: see the full report")
    return lines


def _chosen(parts: list[_Part], room: int, keep_first: bool = True) -> list[_Part]:
    """The parts kept, by rank while they fit in ``room`` lines (``keep_first``: every part
    of rank 0 whatever its size)."""
    used, kept = 0, []
    for part in sorted(parts, key=lambda p: p.rank):  # stable: in order within a rank
        if (keep_first and part.rank == _RANKS["must"]) or used + len(part.lines) <= room:
            kept.append(part)
            used += len(part.lines)
    return kept


def _readable(part: Callable[[Summary], list[str]], summary: Summary) -> list[str]:
    """A part's lines, or none where a saved summary's figures are not what we wrote
    (``tpot-locust report`` reads files a person may have edited): never a traceback."""
    try:
        return part(summary)
    except (ValueError, TypeError, KeyError, AttributeError):
        return []


def _headline(summary: Summary, sweep_step: bool) -> str:
    name = printable(str(summary.get("run", NO_FACTS).scenario or "run"))[:_SHOWN_NAME]
    verdict: Verdict | None = summary.get("slo")
    if verdict and sweep_step:
        said = "a step of a sweep (its SLOs below)"
    elif verdict:
        said = f"SLO verdict {str(verdict.get('verdict', '-')).upper()}"
        said += f" (exit {verdict.get('exit_code', '-')})"
    else:
        said = "no SLO gated this run"
    return f"=== tpot-locust: {name}: {said} ==="


def _requests(summary: Summary) -> list[str]:
    """Requests and throughput in a line; where none finished (every answer outlasts the
    run), what was measured: the requests in flight, the window's tokens and their rate."""
    requests = summary["requests"]
    if not requests["ok"] and not requests["failed"]:
        in_flight = requests.get("interrupted") or 0
        said = f"requests: none finished ({in_flight:,} in flight at the stop)"
        return [f"{said}  |  {throughput(summary)}"]
    named = sorted(requests["errors"].items(), key=lambda item: -item[1])
    errors = ", ".join(f"{printable(k)} {v:,}" for k, v in named[:_SHOWN_ERRORS])
    if len(named) > _SHOWN_ERRORS:
        errors += f", {len(named) - _SHOWN_ERRORS} more kinds"
    return [
        f"requests ok {requests['ok']:,}, failed {requests['failed']:,}"
        + (f" ({errors})" if errors else "")
        + f"  |  {throughput(summary)}"
    ]


def _same(one: MetricFigures, other: MetricFigures) -> bool:
    keys = ("count", *STATISTICS)
    return all(one.get(key) == other.get(key) for key in keys)


def _itl_line(itl: MetricFigures | None, tpot: MetricFigures | None) -> str:
    """ITL apart only where it differs from TPOT (one token per event: they are the same)."""
    if itl and tpot and _same(itl, tpot):
        return "ITL: the same as TPOT (one token per event)"
    return _compact("ITL", itl) or "ITL: no samples"


_COMPACT_FIGURES: tuple[tuple[str, Statistic], ...] = (
    ("median", "p50"),
    ("P90", "p90"),
    ("P99", "p99"),
    ("P99.9", "p99.9"),
    ("max", "max"),
)


def _compact(title: str, metric: MetricFigures | None) -> str:
    """One metric in one line: median, P90, P99, P99.9, max (ms) and its samples; to the
    thousandth of a ms where the line has room, else fewer decimals (seconds-long E2E)."""
    if not metric or not metric.get("count"):
        return ""
    line = ""
    for digits in (3, 1, 0):
        figures = "  ".join(f"{label} {metric[key]:,.{digits}f}" for label, key in _COMPACT_FIGURES)
        count = metric["count"]
        line = f"{title + ':':6}{figures} ms  ({count:,} sample{'s' * (count != 1)})"
        if len(line) <= WIDTH:
            break
    return line


def _truth_lines(summary: Summary) -> list[str]:
    """The truth check in a line (the embedded simulator's), with its failure if any, and
    a warning when the simulator fell behind its own schedule (said as the check reads)."""
    check: TruthCheck | None = summary.get("truth_check")
    if not check:
        return []
    share = (check.get("coverage") or {}).get("share")
    gaps = f"; {share:.1%} of gaps measured" if share is not None else ""
    worst = f"{check['worst_error_ms']:.3f} ms"
    line = f"truth check: every TPOT, ITL and TTFT figure within {worst} of the truth{gaps}"
    failed = check.get("passed") is False
    if failed:
        line = (
            f"! truth check FAILED: {worst} off the truth (tolerance "
            f"{check['tolerance_ms']:g} ms){gaps}"
        )
    schedule = check.get("schedule")
    lines = [line]
    if schedule and schedule["behind"]:
        lines.append(behind_warning(schedule, failed))
    if schedule and schedule.get("client_held"):
        lines.append(held_warning(schedule))
    return lines


def _why_lines(summary: Summary) -> list[str]:
    """Why the tail in two lines: the causes above TPOT P99 as parts of 100 %
    (``attribution.shares_of_100``), and the worst gap's story."""
    attribution = summary.get("attribution")
    row = metric_tails(attribution, TPOT.name).get("p99") if attribution else None
    if not row or not row.get("samples"):
        return []
    parts = shares_of_100(row["shares"])
    causes = sorted(
        ((share, cause) for cause, share in parts.items() if cause != UNEXPLAINED and share > 0),
        key=lambda item: -item[0],
    )
    named = [f"{cause_title(cause)} {share:.0f}%" for share, cause in causes[:_SHOWN_CAUSES]]
    if other := sum(share for share, _ in causes[_SHOWN_CAUSES:]):
        named.append(f"other {other:.0f}%")
    named.append(f"{cause_title(UNEXPLAINED)} {parts.get(UNEXPLAINED, 0):.0f}%")
    lines = [
        f"why the tail: of the {row['samples']:,} gaps above TPOT P99 ({row['above_ms']:.3f} "
        f"ms): " + ", ".join(named)
    ]
    worst = (attribution or {}).get("worst") or []
    if worst:
        run = summary.get("run", NO_FACTS)
        series = (run.server_metrics or {}).get("series")
        lines.append(f"  worst {gap_story(worst[0], run.start_wall_s, series)}")
    return lines


def _warnings(summary: Summary) -> list[str]:
    """The full report's warnings (its lines marked ``!`` or in capitals), as it says them."""
    return [
        line for line in format_report(summary).splitlines() if line.startswith(_WARNING_OPENINGS)
    ]


def _where(full_report: Path | None, html_report: Path | None) -> list[str]:
    """A line a file, its path whole (never wrapped: a terminal links it, a script reads it)."""
    places = (("full report", full_report), ("report.html", html_report))
    return [f"tpot-locust: {what} {path}" for what, path in places if path is not None]


# --- the verdict's table, under the first screen --------------------------------------------


def verdict_headline(verdict: Verdict, sweep_step: bool = False) -> str:
    """The verdict table's first line; a sweep's step says where it stands to the knee."""
    if sweep_step:
        where = {"pass": "within its SLOs", "fail": "over its SLOs: the knee's far side"}
        said = where.get(verdict["verdict"], verdict["verdict"].upper())
        return f"=== sweep step: {said} ==="
    return f"=== SLO verdict: {verdict['verdict'].upper()} (exit {verdict['exit_code']}) ==="


def verdict_screen(verdict: Verdict, sweep_step: bool = False) -> list[str]:
    """The verdict as the terminal shows it under the first screen, in at most
    ``VERDICT_LINES`` lines of ``WIDTH`` columns: the checks that passed share a line or
    two, each with its figure; each other check has its own lines, as do the reasons the
    run is not a valid measurement and the warnings; what does not fit is counted in a line
    (``summary.md`` and ``report.txt`` have every check)."""
    checks = verdict["checks"]
    passed = [check for check in checks if check["verdict"] == "pass"]
    parts: list[_Part] = []  # ranks: why the run is invalid, then the checks, the warnings
    if passed:
        figures = ", ".join(f"{printable(c['name'])} ({measured_text(c)})" for c in passed)
        parts.append(_Part(1, _marked("PASS", f"{len(passed)} of {len(checks)}: {figures}")))
    for check in checks:
        if check["verdict"] != "pass":
            said = f"{printable(check['name'])}: {printable(check['why'])}"
            parts.append(_Part(1, _marked(MARKS.get(check["verdict"], "?"), said)))
    parts += [
        _Part(0, _marked("INVALID", f"run: {printable(why)}")) for why in verdict["run_invalid"]
    ]
    parts += [_Part(2, _marked("!", printable(warning))) for warning in verdict["warnings"]]
    room = VERDICT_LINES - 1
    kept = _chosen(parts, room, keep_first=False)
    if len(kept) < len(parts):
        kept = _chosen(parts, room - 1, keep_first=False)
    lines = [verdict_headline(verdict, sweep_step)]
    lines += [line for part in parts if part in kept for line in part.lines]
    if left := len(parts) - len(kept):
        lines += _marked("", f"and {left:,} more (checks, reasons, warnings): see summary.md")
    return lines


def measured_text(check: CheckRecord) -> str:
    """A check's measured figure with its unit ("-" where none was measured)."""
    value = check["measured"]
    return "-" if value is None else format_measured(value, check["unit"], check.get("metric", ""))


def _marked(mark: str, text: str) -> list[str]:
    """A check's lines: its mark, then its text wrapped under itself."""
    return fit(f"  {mark:<{_VERDICT_INDENT - 2}}{text}", " " * _VERDICT_INDENT)


# --- lines of at most WIDTH columns ---------------------------------------------------------

_KEPT = "\x00"  # a space never broken, while a line is wrapped
_TOGETHER = re.compile(
    r"(?<=\d) (?=(?:ms|s|us|x|KiB|MiB|GiB|tokens/s|requests/s)\b|%)"  # 14.9 s, 57 %
    r"| (?=[<>]=? )|(?<=[<>=]) "  # longest >= 14.9 s
    r"| (?=\([-\d])"  # <= 1% (0%)
)


def fit(line: str, indent: str = "  ") -> list[str]:
    """A line of at most ``WIDTH`` columns, or its words wrapped, ``indent`` after the
    first; a value stays with its unit and a comparison with its figure ("E2E of the longest
    >=" above a lone "14.9 s" read as nothing)."""
    if len(line) <= WIDTH:
        return [line]
    kept = _TOGETHER.sub(_KEPT, line)
    wrapped = textwrap.wrap(
        kept, WIDTH, subsequent_indent=indent, break_long_words=True, break_on_hyphens=False
    )
    return [part.replace(_KEPT, " ") for part in wrapped]
