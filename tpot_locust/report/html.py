"""``report.html``: one self-contained file per run (or several runs overlaid).

Inline CSS and SVG (``charts``), no script and no link to anything outside the file: it
opens from disk in any browser, offline, and prints (one section a page where it fits).
It opens on a summary card, the terminal's first screen (``first_screen``); each section
after it is a ``<details>`` a reader opens or closes (the SLO verdict, the latency tables
and every section of charts open: a report whose every chart had to be opened first read as
one without charts). The Run table has one row a name (the window's lines share one), and
people's names throughout (TPOT, server pause), never the summary's keys or request ids.
Sections: run metadata, SLO verdict, truth check, the seed-style table per class, the
percentile distributions, the time series (bursts shaded, client stalls marked), why the
tail (``tail_pictures``: the causes the slowest gaps overlapped, the tail's timeline with the
prefill and the server's state under it, the server's own percentiles, the attribution
check), steady vs burst interference, the worst gaps and the scenario used (secrets already
removed).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, cast

from tpot_locust.common import metric_catalogue as catalogue
from tpot_locust.common.metric_catalogue import ITL, TPOT, TTFAT, TTFT
from tpot_locust.common.percentiles import PERCENTILE_KEYS, STATISTICS, UP_TO_P99_9
from tpot_locust.common.results_files import write_file
from tpot_locust.common.results_folder import REPORT_FILE
from tpot_locust.common.run_facts import NO_FACTS, TimeseriesPoint, interval_figures
from tpot_locust.metrics.histograms import histogram_stats
from tpot_locust.metrics.metric_set import ClassMetrics, MetricSet
from tpot_locust.report.charts import (
    CHART_CSS,
    CURVE_PERCENTILES,
    Curve,
    Shading,
    escape,
    percentile_chart,
    timeseries_chart,
)
from tpot_locust.report.first_screen import first_screen
from tpot_locust.report.summary_types import ClientFigures, Summary, TruthCheck, Verdict
from tpot_locust.report.tail_pictures import has_tail_facts, why_the_tail
from tpot_locust.report.token_figures import format_token_kinds, reasoned
from tpot_locust.report.truth_check import format_schedule, signed
from tpot_locust.report.window_figures import format_window, throughput

TABLE_METRICS = catalogue.names("in_table")
DISTRIBUTION_METRICS = catalogue.names("in_charts")
PER_TOKEN_METRICS = catalogue.names("per_token")  # gaps: a tokens/s row beside them
NAMES = catalogue.shorts()

PAGE_CSS = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 24px auto; max-width: 1000px;
       color: #111; padding: 0 12px; }
h1 { font-size: 22px; margin-bottom: 4px; } h2 { font-size: 17px; margin-top: 28px;
     border-bottom: 1px solid #ccc; padding-bottom: 2px; }
table { border-collapse: collapse; margin: 8px 0; font-variant-numeric: tabular-nums; }
th, td { border: 1px solid #ccc; padding: 2px 8px; text-align: right; }
th:first-child, td:first-child { text-align: left; }
th { background: #f3f3f3; }
.pass { color: #16702b; } .fail, .invalid { color: #b00020; font-weight: bold; }
.insufficient { color: #a06000; } .note { color: #555; font-size: 12px; }
pre { background: #f6f6f6; padding: 8px; overflow-x: auto; font-size: 12px; }
.card pre { background: #eef4fb; border: 1px solid #b8cde6; font-size: 13px; }
details > summary { cursor: pointer; } details > summary h2 { display: inline-block; }
.charts { display: flex; flex-wrap: wrap; gap: 8px; }
@media print { body { margin: 0; max-width: none; } section { break-inside: avoid; }
  h2 { break-after: avoid; } }
"""


@dataclass
class RunView:
    """One run as the report reads it: its summary, merged histograms, scenario text."""

    name: str
    summary: Summary
    totals: MetricSet
    scenario_text: str | None = None


def render_report(runs: list[RunView]) -> str:
    title = "tpot-locust report: " + ", ".join(run.name for run in runs)
    body = [f"<h1>{escape(title)}</h1>"]
    body.append(
        '<p class="note">Self-contained: inline SVG and CSS, nothing fetched. '
        "Every figure is defined in docs/metrics.md, Metric definitions.</p>"
    )
    for run in runs:
        prefix = f"{run.name}: " if len(runs) > 1 else ""
        body += _card(prefix, run.summary)
    for run in runs:
        prefix = f"{run.name}: " if len(runs) > 1 else ""
        body += _section(f"{prefix}Run", _metadata(run.summary))
        if verdict := run.summary.get("slo"):
            body += _section(f"{prefix}SLO verdict", _verdict(verdict), opened=True)
        if truth := run.summary.get("truth_check"):
            body += _section(f"{prefix}Truth check (measured - true, ms)", _truth(truth))
        body += _section(f"{prefix}Latency (ms)", _tables(run.summary), opened=True)
    body += _section("Percentile distributions", _distributions(runs), opened=True)
    for run in runs:
        prefix = f"{run.name}: " if len(runs) > 1 else ""
        body += _section(f"{prefix}Over time", _timeseries(run.summary), opened=True)
        if has_tail_facts(run.summary):
            body += _section(f"{prefix}Why the tail", why_the_tail(run.summary), opened=True)
        if interference := _interference(run.summary):
            body += _section(f"{prefix}Interference: steady vs prefill burst", interference)
        if not has_tail_facts(run.summary):  # else Why the tail lists them, with their stories
            body += _section(f"{prefix}Worst gaps", _worst_gaps(run.summary))
        if run.scenario_text:
            body += _section(f"{prefix}Scenario", [f"<pre>{escape(run.scenario_text)}</pre>"])
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f"<title>{escape(title)}</title><style>{PAGE_CSS}{CHART_CSS}</style></head>"
        "<body>" + "\n".join(body) + "</body></html>\n"
    )


def _card(prefix: str, summary: Summary) -> list[str]:
    """The summary card: the terminal's first screen (none where a saved summary's figures
    cannot be read: the sections below say what they can)."""
    try:
        card = "\n".join(first_screen(summary))
    except (ValueError, TypeError, KeyError, AttributeError):
        return []
    return [
        f'<section class="card" id="{_slug(prefix + "summary")}"><h2>'
        f"{escape(prefix)}Summary</h2><pre>{escape(card)}</pre></section>"
    ]


def _slug(title: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in title.lower()).strip("-")


def _section(title: str, parts: list[str], opened: bool = False) -> list[str]:
    """A section a reader opens (``opened``: open already)."""
    head = f'<details id="{escape(_slug(title))}"{" open" if opened else ""}>'
    return [f"{head}<summary><h2>{escape(title)}</h2></summary>", *parts, "</details>"]


def _rows(rows: list[list[str]], header: list[str]) -> str:
    head = "".join(f"<th>{escape(cell)}</th>" for cell in header)
    lines = ["<table><tr>" + head + "</tr>" if any(header) else "<table>"]  # no empty row
    for row in rows:
        lines.append("<tr>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>")
    return "".join(lines) + "</table>"


def _metadata(summary: Summary) -> list[str]:
    run, requests, tokens = summary.get("run", NO_FACTS), summary["requests"], summary["tokens"]
    client = summary.get("client", {})
    workers = summary.get("workers")
    items: list[tuple[str, Any]] = [
        ("scenario", run.scenario or "-"),
        ("tpot-locust", run.version or "-"),
        ("host", run.host or "-"),
        ("users", run.users),
        ("duration", f"{run.duration_s:g} s" if run.duration_s else "-"),
        ("warm-up / cool-down", f"{run.warmup_s or 0:g} s / {run.cooldown_s or 0:g} s"),
        (
            "workers",
            f"{workers['reported_in_full']} of {workers['seen']} reported in full"
            if workers
            else "one process",
        ),
        ("arrival clock", run.arrival_clock or "-"),
        (
            "complete",
            "yes"
            if summary.get("complete", True)
            else f"NO: {summary.get('report_error') or 'a worker was lost'}",
        ),
        ("stopped early", run.stopped_because or "no"),
        (
            "requests",
            f"ok {requests['ok']:,}, failed {requests['failed']:,}, interrupted "
            f"{requests.get('interrupted', 0):,}; errors "
            + (", ".join(f"{k} {v}" for k, v in requests["errors"].items()) or "none"),
        ),
        ("throughput", throughput(summary)),
        ("client", _client_line(client)),
    ]
    if goodput := summary.get("goodput"):
        fraction = "-" if goodput["fraction"] is None else f"{goodput['fraction'] * 100:.2f}%"
        items.append(("goodput", f"{goodput['per_s']:.2f} good requests/s, {fraction} good"))
    items += [("tokens", line) for line in format_token_kinds(tokens)]
    if window := summary.get("window"):
        items.append(
            (
                "window",
                f"{window['gaps']:,} token gaps measured inside it, "
                "every request's (docs/metrics.md, 'The window')",
            )
        )
        items += [("window", line) for line in format_window(summary)]
    if coverage := (summary.get("truth_check") or {}).get("coverage"):
        share = "-" if coverage["share"] is None else f"{coverage['share']:.1%}"
        items.append(
            (
                "window's truth",
                f"measured {coverage['measured']:,} of the "
                f"{coverage['true']:,} gaps the server sent ({share})",
            )
        )
    merged: dict[str, list[str]] = {}  # one row a name: "window" twice read as two windows
    for name, value in items:
        merged.setdefault(str(name), []).append(_for_people(value))
    rows = [[escape(name), escape("; ".join(values))] for name, values in merged.items()]
    return [_rows(rows, ["", ""])]


def _for_people(value: object) -> str:
    """A run fact as a reader says it: no ``None``, ``True`` or ``False``."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def _verdict(verdict: Verdict) -> list[str]:
    rows = []
    for check in verdict["checks"]:
        mark = escape(check["verdict"])
        rows.append(
            [
                escape(check["name"]),
                f'<span class="{mark}">{mark.upper()}</span>',
                escape(check["why"]),
            ]
        )
    for reason in verdict["run_invalid"]:
        rows.append(
            ["run is a valid measurement", '<span class="invalid">INVALID</span>', escape(reason)]
        )
    state = escape(verdict["verdict"])
    head = (
        f'<p>Verdict: <span class="{state}">{state.upper()}</span> '
        f"(exit {verdict['exit_code']})</p>"
    )
    return [head, _rows(rows, ["SLO", "verdict", "why"])]


def _truth(truth: TruthCheck) -> list[str]:
    keys = (*PERCENTILE_KEYS, "max")
    rows = []
    for metric, figures in truth.get("metrics", {}).items():
        cells = [signed(figures[k]["error"]) if k in figures else "-" for k in keys]
        rows.append([escape(NAMES.get(metric, metric)), *cells])
    tolerance, passed = truth.get("tolerance_ms"), truth.get("passed")
    if tolerance is None:
        said = "shown, not gated (--truth-tolerance-ms gates it)"
    else:
        said = f"{'passed' if passed else 'FAILED'}: every error within {tolerance:g} ms"
    told = format_schedule(truth.get("schedule"), passed is False)
    schedule = [f"<p>{escape(line.strip())}</p>" for line in told]
    return [f"<p>{escape(said)}</p>", _rows(rows, ["metric", *keys]), *schedule]


def _client_line(client: ClientFigures) -> str:
    """The client's health for people: its reads, whether it kept up, its loop's stalls."""
    p90, p99 = client.get("read_delay_p90_ms"), client.get("read_delay_p99_ms")
    reads = (
        f"read delay p90 {p90:.3f} ms, p99 {p99:.3f} ms"
        if p90 is not None and p99 is not None
        else "read delay not measured (no kernel stamps)"
    )
    busy = {True: "busy: the client fell behind", False: "kept up", None: "-"}[client.get("busy")]
    share = client.get("loop_held_share")
    held = f", loop held {share:.1%} of the time" if share is not None else ""
    return (
        f"{reads}; {busy}; {client.get('stalls', 0):,} loop stalls "
        f"({client.get('stalled_ms', 0):,.1f} ms{held})"
    )


def _tables(summary: Summary) -> list[str]:
    scopes = [("all classes", summary)]
    if len(summary.get("classes", {})) > 1:
        scopes += [(f"class {name}", scope) for name, scope in summary["classes"].items()]
    parts = []
    for label, scope in scopes:
        rows = []
        for metric in TABLE_METRICS:
            figures = scope["metrics"].get(metric)
            if not figures or not figures["count"]:
                continue
            if metric == TTFAT.name and not reasoned(scope["tokens"]):
                continue  # TTFT itself
            cells = [f"{figures[s]:.3f}" for s in STATISTICS]
            rows.append(
                [NAMES[metric], f"{figures['count']:,}", *cells, f"{figures['above']['p99.99']:,}"]
            )
            if intervals := figures.get("ci95"):  # metrics.md, "How sure is each number"
                shown = [_interval_cell(intervals, s) for s in STATISTICS]
                rows.append([f"{NAMES[metric]} 95% interval", "", *shown, ""])
            if metric in PER_TOKEN_METRICS:  # the terminal's tokens/s column: 1000 / ms
                rates = [f"{1000 / figures[s]:,.1f}" if figures[s] > 0 else "-" for s in STATISTICS]
                rows.append([f"{NAMES[metric]} as tokens/s", "", *rates, ""])
        parts.append(f"<h3>{escape(label)}</h3>")
        parts.append(_rows(rows, ["metric", "count", *STATISTICS, "above p99.99"]))
    parts.append(
        '<p class="note">Fewer than 10 samples above a percentile: that tail is not '
        "yet measured (run longer). 95% interval: where another run of the same scenario on "
        "the same system would land, from the run's time sections (not measured: too few "
        "samples above it a section).</p>"
    )
    return parts


def _interval_cell(intervals: dict[str, list[float] | None], statistic: str) -> str:
    """A percentile's 95 % interval (``low-high`` ms), ``not measured``, or blank (mean, max)."""
    if statistic not in intervals:
        return ""
    bounds = intervals[statistic]
    return "not measured" if bounds is None else f"{bounds[0]:.3f}-{bounds[1]:.3f}"


def distribution_points(metrics: ClassMetrics, name: str) -> list[tuple[float, float]]:
    histogram = metrics.histograms.get(name)
    if histogram is None or not histogram.total_count:
        return []
    stats = histogram_stats(histogram, CURVE_PERCENTILES)
    points = [
        (p, stats.percentiles[p] / 1000) for p in CURVE_PERCENTILES if stats.above[p] or p == 0
    ]
    # the max is the last sample's: at the percentile one sample in the count stands for
    last = min(100 * (1 - 1 / histogram.total_count), CURVE_PERCENTILES[-1])
    if points and last <= points[-1][0]:
        last = points[-1][0]
    return points + [(last, stats.max / 1000)]


def distribution_curves(runs: list[RunView], name: str) -> list[Curve]:
    """One curve per class of a single run (and all of them) and per model its classes
    named, or one per run."""
    if len(runs) == 1:
        totals = runs[0].totals
        curves = [Curve("all", distribution_points(totals.combined(), name))]
        classes = totals.by_class()
        if len(classes) > 1:
            curves += [
                Curve(cls, distribution_points(metrics, name), dashed=True)
                for cls, metrics in sorted(classes.items())
            ]
        curves += [
            Curve(f"model {model}", distribution_points(metrics, name), dashed=True)
            for model, metrics in sorted(totals.by_model().items())
        ]
        return curves
    return [Curve(run.name, distribution_points(run.totals.combined(), name)) for run in runs]


def _distributions(runs: list[RunView]) -> list[str]:
    charts = [
        percentile_chart(f"{NAMES[name]} by percentile", distribution_curves(runs, name))
        for name in DISTRIBUTION_METRICS
    ]
    return [
        '<div class="charts">',
        *charts,
        "</div>",
        '<p class="note">x: percentile on a log scale of 1/(1-p), so p99, p99.9 and p99.99 '
        "get equal room; the curve ends at the max.</p>",
    ]


# A client stall is marked on the time series when it can reach the tail one reads there:
# longer than its interval's TPOT p99 (or this long where no TPOT was measured). A quiet
# run's 2-3 ms stalls had put a red mark on every second.
STALL_MARK_MIN_MS = 10.0


def timeseries_shading(summary: Summary) -> Shading:
    bursts = summary.get("run", NO_FACTS).bursts or {}
    spans = cast("list[tuple[float, float]]", [tuple(span) for span in bursts.get("spans_s", [])])
    marks = [point["t"] for point in summary.get("timeseries", []) if _stall_matters(point)]
    return Shading(spans=spans, marks=marks, mark_label="client stall > that second's TPOT p99")


def _stall_matters(point: TimeseriesPoint) -> bool:
    """Whether an interval's longest client stall can reach its TPOT tail."""
    if not point.get("stalls"):
        return False
    tpot = interval_figures(point, TPOT.name)
    bar = tpot.get("p99") if tpot.get("count") else None
    return float(point.get("loop_lag_max_ms") or 0.0) >= (bar or STALL_MARK_MIN_MS)


_CHART_KEYS: tuple[Literal["p50", "p99", "p99.9"], ...] = ("p50", "p99", "p99.9")


def timeseries_charts(summary: Summary) -> list[str]:
    series = summary.get("timeseries", [])
    shading = timeseries_shading(summary)
    charts = []
    for metric in (TPOT.name, TTFT.name):
        curves = [
            Curve(
                f"{NAMES[metric]} {key}",
                [
                    (p["t"], figures[key])
                    for p in series
                    if (figures := interval_figures(p, metric)).get("count")
                    and figures.get(key) is not None
                ],
            )
            for key in _CHART_KEYS
        ]
        charts.append(timeseries_chart(f"{NAMES[metric]} per interval", curves, "ms", shading))
    rate = [(p["t"], per_s) for p in series if (per_s := p.get("tokens_per_s")) is not None]
    charts.append(timeseries_chart("Tokens/s", [Curve("tokens/s", rate)], "tokens/s", shading))
    users: list[tuple[float, float]] = [(p["t"], p["users"]) for p in series]
    charts.append(timeseries_chart("Users", [Curve("users", users)], "users", shading))
    return charts


def _timeseries(summary: Summary) -> list[str]:
    return ['<div class="charts">', *timeseries_charts(summary), "</div>"]


def _interference(summary: Summary) -> list[str] | None:
    interference = summary.get("interference")
    if not interference:
        return None
    rows = []
    keys = UP_TO_P99_9
    for metric in (TPOT.name, ITL.name):
        for phase in ("steady", "burst"):
            figures = interference["phases"][phase][metric]
            rows.append(
                [
                    f"{NAMES[metric]} {phase}",
                    f"{figures['count']:,}",
                    *(f"{figures[k]:.3f}" for k in keys),
                ]
            )
        factors = interference["interference_factor"][metric]
        rows.append([f"{NAMES[metric]} factor", "", *(_factor(factors[k]) for k in keys)])
    return [_rows(rows, ["", "count", *keys])]


def _factor(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def _worst_gaps(summary: Summary) -> list[str]:
    rows = [
        [f"{gap['ms']:.1f}", escape(gap.get("phase", "")), "yes" if gap.get("client_stall") else ""]
        for gap in summary.get("worst_gaps", [])
    ]
    if not rows:
        return ["<p>none</p>"]
    return [_rows(rows, ["ms", "phase", "client stall"])]


def write_html(path: Path, runs: list[RunView]) -> Path:
    """Write the report to ``path``; an existing folder gets ``report.html`` inside it."""
    if path.is_dir():
        path = path / REPORT_FILE
    write_file(path, render_report(runs))
    return path
