"""Why the tail, drawn: report.html's section and the live charts page's timeline.

- ``why_the_tail``: the section's parts: the tables (``tail_tables``: shares per cause,
  prompt tokens in prefill, the server's own percentiles, the attribution check), each worst
  gap's one-line story (with the server's state at that moment where it was sampled) and
  the tail's timeline.
- ``tail_timeline``: on one time axis (seconds since the run's start), TPOT and ITL per
  interval with the tail's gaps as dots (coloured by cause, the worst larger), and under it,
  panels of the prompt tokens in prefill (ours, steps) and, where the server's metrics were
  sampled, its running and waiting requests, KV cache usage (the 95 % ``kv_pressure`` rule)
  and preemptions per interval. The live charts page draws it too.

Every value read from the summary is checked where it is used (``tail_tables.finite``),
every text escaped, every series thinned (``charts.MAX_TIMELINE_POINTS``).
"""

from __future__ import annotations

from typing import Any

from tpot_locust.common import metric_catalogue as catalogue
from tpot_locust.common.metric_catalogue import ITL, TPOT
from tpot_locust.common.run_facts import NO_FACTS, RunFacts
from tpot_locust.common.text_safety import printable
from tpot_locust.metrics.causes import (
    CLIENT_STALL,
    KV_PRESSURE,
    KV_PRESSURE_AT,
    NETWORK,
    PREEMPTION,
    PREFILL,
    SERVER_CAUSES,
    SERVER_PAUSE,
)
from tpot_locust.metrics.tail_gaps import WORST_GAPS_SHOWN
from tpot_locust.report.attribution import cause_title, gap_story
from tpot_locust.report.charts import HEIGHT, Curve, Dot, Rule, Shading, timeline_panel
from tpot_locust.report.server_view import format_gpu_state
from tpot_locust.report.summary_types import Summary
from tpot_locust.report.tail_tables import (
    as_dict,
    as_list,
    attribution_check_parts,
    finite,
    note,
    prefill_tokens_table,
    server_facts,
    server_own_percentiles,
    shares_table,
    shown,
)

SHORTS = catalogue.shorts()
TIMELINE_CURVES = ((TPOT.name, "p99"), (ITL.name, "p99"), (ITL.name, "p99.9"), (ITL.name, "max"))
SERVER_SERIES = ("running", "waiting", "kv_usage", "preemptions")
DOT_LEGEND = {
    "gap-prefill": "gap: prefill",
    "gap-server": "gap: server cause",
    "gap-client": "gap: client/network",
    "gap-none": "gap: no cause",
}


def has_tail_facts(summary: Summary) -> bool:
    """Whether a run has anything for "Why the tail" (results of older versions have not)."""
    run = summary.get("run", NO_FACTS)
    return any(
        isinstance(part, dict)
        for part in (
            summary.get("attribution"),
            summary.get("attribution_check"),
            run.prefill,
            run.server_metrics,
            run.gpu_metrics,
        )
    )


def why_the_tail(summary: Summary) -> list[str]:
    """The parts of report.html's "Why the tail" section."""
    run = summary.get("run", NO_FACTS)
    server = as_dict(run.server_metrics)
    attribution = as_dict(summary.get("attribution"))
    parts: list[str] = []
    if attribution:
        parts += shares_table(attribution)
        parts += prefill_tokens_table(attribution)
        parts += worst_stories(attribution, run)
    parts.append("<h3>The tail's timeline</h3>")
    charts, flat = timeline_charts(summary)
    parts += ['<div class="timeline">', *charts, "</div>"]
    if flat:
        parts.append(
            note("Left out, nothing to show (zero throughout the run): " + "; ".join(flat) + ".")
        )
    parts.append(
        note(
            "x: seconds since the run's start, the same in every panel. Dots: the largest gaps "
            f"kept (the {WORST_GAPS_SHOWN} worst larger, with their story on hover), coloured "
            "by what they overlapped; prompt tokens in prefill: the most in flight at once "
            "(sent, first token not yet back)."
        )
    )
    parts += server_facts(server)
    parts += [note(line) for line in format_gpu_state(summary)]
    parts += server_own_percentiles(summary, server)
    parts += attribution_check_parts(summary.get("attribution_check"))
    return parts


def worst_stories(attribution: dict[str, object], run: RunFacts) -> list[str]:
    """Each worst gap's one-line story, with the server's state then where it was sampled."""
    origin = finite(run.start_wall_s)
    series = checked_series(as_dict(run.server_metrics))
    items = []
    for gap in as_list(attribution.get("worst"))[:WORST_GAPS_SHOWN]:
        story = _story(gap, origin, series)
        if story is not None:  # a request's id says nothing to a reader: summary.json has it
            items.append(f"<li>{shown(story)}</li>")
    if not items:
        return []
    return ["<h3>The worst gaps</h3>", '<ol class="stories">', *items, "</ol>"]


def _story(gap: object, origin: float | None, series: dict[str, list[object]] | None) -> str | None:
    """``attribution.gap_story`` of a gap whose every field was checked first."""
    if not isinstance(gap, dict) or finite(gap.get("ms")) is None:
        return None
    causes = [c for c in as_list(gap.get("causes")) if isinstance(c, str)]
    clean = {
        "ms": finite(gap["ms"]),
        "causes": causes,
        "at_wall_s": finite(gap.get("at_wall_s")),
        "prefill_requests": int(finite(gap.get("prefill_requests")) or 0),
        "prefill_tokens": int(finite(gap.get("prefill_tokens")) or 0),
        "prefill_overlapped": gap.get("prefill_overlapped") is True,
        "pause_streams": int(finite(gap.get("pause_streams")) or 0),
    }
    return gap_story(clean, origin, series)


def checked_series(server: dict[str, object]) -> dict[str, list[object]] | None:
    """The server's sampled series as ``gap_story`` reads it: times all finite and in
    order, every other value a finite number or None; None when there is no such series."""
    series = as_dict(server.get("series"))
    raw = as_list(series.get("t_wall_s"))
    times = [t for value in raw if (t := finite(value)) is not None]
    if not times or len(times) != len(raw):
        return None
    if any(later < earlier for earlier, later in zip(times, times[1:], strict=False)):
        return None
    checked: dict[str, list[Any]] = {"t_wall_s": times}
    for name in SERVER_SERIES:
        values = [finite(value) for value in as_list(series.get(name))][: len(times)]
        checked[name] = values + [None] * (len(times) - len(values))
    return checked


# --- the timeline --------------------------------------------------------------------------


def _interval_points(series: list[object], metric: str, key: str) -> list[tuple[float, float]]:
    points = []
    for point in series:
        figures = as_dict(as_dict(point).get(metric))
        t, value = finite(as_dict(point).get("t")), finite(figures.get(key))
        if t is not None and value is not None and figures.get("count"):
            points.append((t, value))
    return points


def _pairs(values: object) -> list[tuple[float, float]]:
    """[[x, y], ...] as checked pairs (a saved ``tokens_s``)."""
    pairs = []
    for item in as_list(values):
        if isinstance(item, list) and len(item) == 2:
            x, y = finite(item[0]), finite(item[1])
            if x is not None and y is not None:
                pairs.append((x, y))
    return pairs


def _gpu_panels(
    run: RunFacts, origin: float | None
) -> list[tuple[str, list[Curve], dict[str, object]]]:
    """A panel a DCGM exporter: its GPUs' lowest SM clock over the run (a throttled GPU's
    clock drops; ``gpu_throttle`` windows come from its clock event reasons)."""
    panels: list[tuple[str, list[Curve], dict[str, Any]]] = []
    if origin is None:
        return panels
    for label, sampled in as_dict(run.gpu_metrics).items():
        gpu = as_dict(as_dict(sampled).get("gpu"))
        points = [(x - origin, y) for x, y in _pairs(gpu.get("sm_clock_series"))]
        if points:
            panels.append(
                (
                    f"GPU {printable(str(label))[:32]}: lowest SM clock",
                    [Curve("SM clock MHz", points)],
                    {"unit": "MHz"},
                )
            )
    return panels


def _server_points(
    server: dict[str, Any], name: str, origin: float, scale: float = 1.0, spans: bool = False
) -> list[tuple[float, float]]:
    """One series of the sampled server, x in seconds since the run's start. ``spans``: each
    point at the start of the span it covers (a point's ``t_wall_s`` ends its span), for a
    step line of per-interval counts (preemptions)."""
    series = as_dict(server.get("series"))
    interval = finite(server.get("interval_s")) or 0.0
    points: list[tuple[float, float]] = []
    previous: float | None = None
    for t, value in zip(as_list(series.get("t_wall_s")), as_list(series.get(name)), strict=False):
        x, y = finite(t), finite(value)
        if x is None:
            continue
        start = (x - interval if previous is None else previous) if spans else x
        previous = x
        if y is not None:
            points.append((start - origin, y * scale))
    return points


def _dot_kind(causes: list[object]) -> str:
    """A dot's colour: the cause that says most about the gap. A client stall first (the
    gap is ours, not the server's), then a preemption, a prefill, the weaker server windows
    (KV pressure, queueing: common under any load), the network."""
    if CLIENT_STALL in causes:
        return "gap-client"
    if PREEMPTION in causes:
        return "gap-server"
    if PREFILL in causes:
        return "gap-prefill"
    if SERVER_PAUSE in causes or any(cause in SERVER_CAUSES for cause in causes):
        return "gap-server"
    if NETWORK in causes:
        return "gap-client"
    return "gap-none"


def _gap_dots(summary: Summary, origin: float | None) -> list[Dot]:
    """The kept largest gaps (``tail_gaps``, else the worst) as dots; the worst larger."""
    attribution = as_dict(summary.get("attribution"))
    gaps = as_list(attribution.get("tail_gaps")) or as_list(attribution.get("worst"))
    if origin is None:
        return []
    series = checked_series(as_dict(summary.get("run", NO_FACTS).server_metrics))
    found = []
    for gap in gaps:
        gap = as_dict(gap)
        ms, at = finite(gap.get("ms")), finite(gap.get("at_wall_s"))
        if ms is not None and at is not None:
            found.append((ms, at - origin, gap))
    found.sort(key=lambda item: item[0], reverse=True)
    dots = []
    for rank, (ms, x, gap) in enumerate(found):
        big = rank < WORST_GAPS_SHOWN
        tip = printable(_story(gap, origin, series) or "") if big else ""
        dots.append(Dot(x, ms, _dot_kind(as_list(gap.get("causes"))), tip, big))
    return dots


def _shading(summary: Summary) -> Shading:
    spans = _pairs(as_dict(summary.get("run", NO_FACTS).bursts).get("spans_s"))
    marks = []
    for point in as_list(summary.get("timeseries")):
        t = finite(as_dict(point).get("t"))
        if t is not None and as_dict(point).get("stalls"):
            marks.append(t)
    return Shading(spans=spans, marks=marks)


def tail_timeline(summary: Summary) -> list[str]:
    """The tail's timeline: the top panel (TPOT/ITL per interval, the tail's gaps as dots)
    and the panels under it on the same x axis; each an SVG string."""
    return timeline_charts(summary)[0]


def _flat(curves: list[Curve]) -> bool:
    """Nothing to show: every point of every curve zero (a KV cache never used, no
    preemption), or no point at all."""
    return all(y == 0 for curve in curves for _, y in curve.points)


def timeline_charts(summary: Summary) -> tuple[list[str], list[str]]:
    """``tail_timeline``'s charts, and the titles of the panels left out as flat."""
    run = summary.get("run", NO_FACTS)
    origin = finite(run.start_wall_s)
    server = as_dict(run.server_metrics)
    series = as_list(summary.get("timeseries"))
    curves = [
        Curve(f"{SHORTS.get(metric, metric)} {key}", _interval_points(series, metric, key))
        for metric, key in TIMELINE_CURVES
    ]
    dots = _gap_dots(summary, origin)
    prefill = as_dict(run.prefill)
    tokens = _pairs(prefill.get("tokens_s"))
    panels: list[tuple[str, list[Curve], dict[str, Any]]] = []
    if prefill:
        rules = []
        if (long_prompt := finite(prefill.get("long_prompt_tokens"))) is not None:
            rules.append(Rule(long_prompt, f"long prompt {long_prompt:,.0f}"))
        panels.append(
            (
                "Prompt tokens in prefill (ours)",
                [Curve("prompt tokens", tokens)],
                {"unit": "tokens", "steps": True, "rules": rules},
            )
        )
    if as_list(as_dict(server.get("series")).get("t_wall_s")) and origin is not None:
        engine = server.get("engine")
        name = f"Server ({engine})" if isinstance(engine, str) and engine else "Server"
        panels.append(
            (
                f"{name}: requests running and waiting",
                [
                    Curve("running", _server_points(server, "running", origin)),
                    Curve("waiting", _server_points(server, "waiting", origin), True),
                ],
                {"unit": "requests"},
            )
        )
        panels.append(
            (
                f"{name}: KV cache usage",
                [Curve("KV usage %", _server_points(server, "kv_usage", origin, 100))],
                {
                    "unit": "%",
                    "y_max": 100.0,
                    "rules": [
                        Rule(
                            KV_PRESSURE_AT * 100,
                            f"{cause_title(KV_PRESSURE)} {KV_PRESSURE_AT * 100:g} %",
                        )
                    ],
                },
            )
        )
        own_p99 = [
            Curve("server p99 low", _server_points(server, "itl_p99_low_ms", origin, spans=True)),
            Curve(
                "server p99 high",
                _server_points(server, "itl_p99_high_ms", origin, spans=True),
                True,
            ),
        ]
        if any(curve.points for curve in own_p99):  # the server exports its ITL histogram
            ours = Curve("our ITL p99", _interval_points(series, ITL.name, "p99"))
            panels.append(
                (
                    f"{name}: its own ITL p99 per interval (the bucket it lies in)",
                    [*own_p99, ours],
                    {"unit": "ms", "steps": True},
                )
            )
        panels.append(
            (
                f"{name}: preemptions per interval",
                [Curve("preemptions", _server_points(server, "preemptions", origin, spans=True))],
                {"unit": "preemptions", "steps": True},
            )
        )
    panels += _gpu_panels(run, origin)
    xs = [x for curve in curves for x, _ in curve.points] + [dot.x for dot in dots]
    xs += [x for _, panel_curves, _ in panels for curve in panel_curves for x, _ in curve.points]
    x_max = max((x for x in xs if x >= 0), default=1.0)
    kinds = {dot.kind for dot in dots}
    legend = [(kind, label) for kind, label in DOT_LEGEND.items() if kind in kinds]
    charts = [
        timeline_panel(
            "The tail's timeline: TPOT and ITL per interval, the largest gaps",
            curves,
            "ms",
            x_max,
            shading=_shading(summary),
            dots=dots,
            dot_legend=legend,
            height=HEIGHT,
        )
    ]
    flat = []
    for title, panel_curves, options in panels:
        if _flat(panel_curves):
            flat.append(title)
            continue
        charts.append(timeline_panel(title, panel_curves, options.pop("unit"), x_max, **options))
    return charts, flat
