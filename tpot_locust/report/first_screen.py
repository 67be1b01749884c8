"""The terminal's first screen: what a reader takes in at a glance, at the end of a run.

Why its own room: the full report (``summary.format_full_report``, every table of every
class, the truth and attribution checks) runs to ~150 lines; a reader wants the seed's
figures first, as k6's end-of-test summary or the seed report gives them: the verdict, the
TPOT table (mean, median, P90 ... P99.99, max, with tokens/s and samples above), a line each
for ITL, TTFT, E2E and throughput, the truth check and why the tail in a line or two, the
warnings that change how to read the numbers, and where the rest is. At most ~30 lines of
at most 100 columns (``WIDTH``); the full report goes to ``report.txt`` in the results
folder, and to the terminal with ``tpot-locust run --report full``.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path

from tpot_locust.common.metric_catalogue import E2E, ITL, TPOT, TTFT
from tpot_locust.common.percentiles import STATISTICS, Statistic
from tpot_locust.common.run_facts import NO_FACTS
from tpot_locust.common.text_safety import printable
from tpot_locust.report.attribution import gap_story, metric_tails
from tpot_locust.report.summary import format_metric, format_report
from tpot_locust.report.summary_types import MetricFigures, Summary, TruthCheck, Verdict
from tpot_locust.report.truth_check import behind_warning
from tpot_locust.report.window_figures import format_window

WIDTH = 100
_WARNING_OPENINGS = ("!", "RUN STOPPED", "REPORT INCOMPLETE", "INCOMPLETE RUN")
_SHOWN_CAUSES = 3  # causes named in the "why the tail" line, the largest shares first


def first_screen(
    summary: Summary,
    full_report: Path | None = None,
    html_report: Path | None = None,
    sweep_step: bool = False,
) -> list[str]:
    """The first screen's lines (each at most ``WIDTH`` columns); ``sweep_step``: a sweep's
    step, whose verdict the sweep reads (not the run's pass or fail)."""
    requests, tokens = summary["requests"], summary["tokens"]
    lines = [_headline(summary, sweep_step)]
    errors = ", ".join(f"{printable(k)} {v:,}" for k, v in requests["errors"].items())
    lines.append(
        f"requests ok {requests['ok']:,}, failed {requests['failed']:,}"
        + (f" ({errors})" if errors else "")
        + f"  |  {tokens['per_s']:,.1f} tokens/s, {requests['per_s']:.2f} requests/s over "
        f"{summary['window_s']:.1f} s"
    )
    if interrupted := requests.get("interrupted"):
        lines.append(
            f"requests interrupted by the stop: {interrupted:,} (their gaps in the "
            "window count; E2E counts finished requests)"
        )
    if any((summary.get("window") or {}).get("cut", {}).values()):
        lines += [line for line in format_window(summary) if not line.startswith("gaps after")]
    if workers := summary.get("workers"):
        full, seen = workers["reported_in_full"], workers["seen"]
        lines.append(f"workers: {full} of {seen} reported in full")
    metrics = summary["metrics"]
    tpot = metrics.get(TPOT.name)
    if tpot and tpot["count"]:
        table = format_metric(TPOT.name, tpot)
        lines += [""] + [line for line in table if not line.lstrip().startswith("skew")]
    else:
        lines.append("TPOT: no samples (no token gap arrived inside the window)")
    lines.append(_itl_line(metrics.get(ITL.name), tpot))
    for metric in (TTFT, E2E):
        if line := _compact(metric.short, metrics.get(metric.name)):
            lines.append(line)
    lines += _readable(_truth_line, summary)
    lines += _readable(_why_lines, summary)
    lines += _readable(_warnings, summary)
    return [wrapped for line in lines for wrapped in _fit(printable(line))] + _where(
        full_report, html_report
    )


def _readable(part: Callable[[Summary], list[str]], summary: Summary) -> list[str]:
    """A part's lines, or none where a saved summary's figures are not what we wrote
    (``tpot-locust report`` reads files a person may have edited): never a traceback."""
    try:
        return part(summary)
    except (ValueError, TypeError, KeyError, AttributeError):
        return []


def _headline(summary: Summary, sweep_step: bool) -> str:
    name = printable(str(summary.get("run", NO_FACTS).scenario or "run"))
    verdict: Verdict | None = summary.get("slo")
    if verdict and sweep_step:
        said = "a step of a sweep (its SLOs below)"
    elif verdict:
        said = f"SLO verdict {str(verdict.get('verdict', '-')).upper()}"
        said += f" (exit {verdict.get('exit_code', '-')})"
    else:
        said = "no SLO gated this run"
    return f"=== tpot-locust: {name}: {said} ==="


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
    """One metric in one line: median, P90, P99, P99.9, max (ms) and its samples."""
    if not metric or not metric.get("count"):
        return ""
    figures = "  ".join(f"{label} {metric[key]:,.3f}" for label, key in _COMPACT_FIGURES)
    return f"{title + ':':6}{figures} ms  ({metric['count']:,} samples)"


def _truth_line(summary: Summary) -> list[str]:
    """The truth check in a line (the embedded simulator's), with its failure if any, and
    a warning when the simulator fell behind its own schedule."""
    check: TruthCheck | None = summary.get("truth_check")
    if not check:
        return []
    coverage = check.get("coverage") or {}
    share = coverage.get("share")
    gaps = (
        f"; {coverage.get('measured', 0):,} of {coverage.get('true', 0):,} of the window's "
        f"gaps ({share:.1%})"
        if share is not None
        else ""
    )
    line = (
        f"truth check: every TPOT, ITL and TTFT figure (P50 ... P99.99, max) within "
        f"{check['worst_error_ms']:.3f} ms of the simulator's truth{gaps}"
    )
    if check.get("passed") is False:
        line = (
            f"! truth check FAILED: {check['worst_error_ms']:.3f} ms is over the tolerance "
            f"of {check['tolerance_ms']:g} ms{gaps}"
        )
    schedule = check.get("schedule")
    return [line, behind_warning(schedule)] if schedule and schedule["behind"] else [line]


def _why_lines(summary: Summary) -> list[str]:
    """Why the tail in two lines: the causes above TPOT P99, and the worst gap's story."""
    attribution = summary.get("attribution")
    row = metric_tails(attribution, TPOT.name).get("p99") if attribution else None
    if not row or not row.get("samples"):
        return []
    shares = sorted(
        (
            (share, cause)
            for cause, share in row["shares"].items()
            if cause != "none" and share is not None  # None only where no sample was above
        ),
        reverse=True,
    )
    named = [f"{cause} {share:.0%}" for share, cause in shares[:_SHOWN_CAUSES] if share > 0]
    none = row["shares"].get("none")
    if none is not None:
        named.append(f"no cause {none:.0%}")
    lines = [
        f"why the tail: of the {row['samples']:,} gaps above TPOT P99 ({row['above_ms']:.3f} "
        f"ms), overlapped " + ", ".join(named)
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


def _fit(line: str) -> list[str]:
    """A line of at most ``WIDTH`` columns, or its words wrapped, indented after the first."""
    if len(line) <= WIDTH:
        return [line]
    return textwrap.wrap(line, WIDTH, subsequent_indent="  ", break_long_words=True)
