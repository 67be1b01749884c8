"""Charts as inline SVG, written here: no library, no script, nothing fetched.

Two kinds, both plain functions of numbers:

- ``percentile_chart``: HdrHistogram's percentile distribution plot. x is the percentile
  on a log scale of 1 / (1 - p) (0, 90, 99, 99.9, 99.99, 99.999 evenly spaced), so the far
  tail gets as much room as the body; y is the value in ms. Several curves overlay (classes
  of one run, or runs).
- ``timeseries_chart``: values over the run's time, with burst windows shaded and marks
  where the client's loop stalled.
- ``timeline_panel``: one panel of the tail's timeline (``report.tail_pictures``): panels
  stacked one under another share one x axis (``x_max``, the same margins), so a gap drawn
  as a dot in the top one sits above what the prefill and the server did at that moment;
  a series may be drawn as steps, with horizontal rules (the 95 % KV pressure line).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from html import escape as _html_escape
from typing import Any

from tpot_locust.common.text_safety import xml_text

WIDTH, HEIGHT = 720, 300
LEFT, RIGHT, TOP, BOTTOM = 64, 150, 28, 40
COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f")
LEGEND_STEP = 17  # px between legend entries (a line of 13 px text and its gap)
MAX_NINES = 6  # the x axis ends at p99.9999
TICK_PERCENTILES = (0.0, 90.0, 99.0, 99.9, 99.99, 99.999, 99.9999)
# The percentiles a distribution curve is drawn through: 20 per decade of 1 / (1 - p).
CURVE_PERCENTILES = tuple(
    round(100 * (1 - 10 ** (-step / 20)), 6) for step in range(0, MAX_NINES * 20 + 1)
)


def escape(text: str) -> str:
    """HTML-escaped, with the control characters HTML and XML forbid shown as escapes."""
    return _html_escape(xml_text(text))


@dataclass
class Curve:
    label: str
    points: list[tuple[float, float]]  # (x, y): (percentile, ms) or (seconds, value)
    dashed: bool = False


@dataclass
class Shading:
    """Spans of x to shade (burst windows) and x positions to mark (client stalls)."""

    spans: list[tuple[float, float]] = field(default_factory=list)
    marks: list[float] = field(default_factory=list)
    span_label: str = "prefill burst"
    mark_label: str = "client stall"


def nines(percentile: float) -> float:
    """x of a percentile: log10(1 / (1 - p)), 0 at p0, 2 at p99, 4 at p99.99."""
    rest = 1 - percentile / 100
    return MAX_NINES if rest <= 10**-MAX_NINES else min(-math.log10(rest), MAX_NINES)


def _nice_top(value: float) -> float:
    """The axis end: 1, 2 or 5 times a power of ten, at or above ``value``."""
    if value <= 0:
        return 1.0
    power: float = 10 ** math.floor(math.log10(value))
    for step in (1, 2, 5, 10):
        if value <= step * power:
            return step * power
    return 10 * power


def _fmt(value: float) -> str:
    return f"{value:g}" if value >= 1 or value == 0 else f"{value:.3g}"


class _Plot:
    """Coordinates of one chart: data x/y to SVG pixels."""

    def __init__(
        self, x_max: float, y_max: float, x_min: float = 0.0, height: int = HEIGHT
    ) -> None:
        self.x_min, self.x_max = x_min, max(x_max, x_min + 1e-9)
        self.y_max = _nice_top(y_max)
        self.height = height
        self.inner_w = WIDTH - LEFT - RIGHT
        self.inner_h = height - TOP - BOTTOM

    def x(self, value: float) -> float:
        return LEFT + (value - self.x_min) / (self.x_max - self.x_min) * self.inner_w

    def y(self, value: float) -> float:
        return TOP + self.inner_h - min(value, self.y_max) / self.y_max * self.inner_h


def _frame(title: str, plot: _Plot, unit: str, x_ticks: list[tuple[float, str]]) -> list[str]:
    parts = [
        f'<text x="{LEFT}" y="16" class="title">{escape(title)}</text>',
        f'<rect x="{LEFT}" y="{TOP}" width="{plot.inner_w}" height="{plot.inner_h}" '
        'class="frame"/>',
    ]
    for step in range(5):
        value = plot.y_max * step / 4
        y = plot.y(value)
        parts.append(
            f'<line x1="{LEFT}" y1="{y:.1f}" x2="{LEFT + plot.inner_w}" y2="{y:.1f}" class="grid"/>'
        )
        parts.append(f'<text x="{LEFT - 6}" y="{y + 4:.1f}" class="ytick">{_fmt(value)}</text>')
    middle = f"{TOP + plot.inner_h / 2:.0f}"
    parts.append(
        f'<text x="14" y="{middle}" class="unit" '
        f'transform="rotate(-90 14 {middle})">{escape(unit)}</text>'
    )
    for value, label in x_ticks:
        x = plot.x(value)
        parts.append(
            f'<line x1="{x:.1f}" y1="{TOP}" x2="{x:.1f}" y2="{TOP + plot.inner_h}" class="grid"/>'
        )
        parts.append(
            f'<text x="{x:.1f}" y="{TOP + plot.inner_h + 16}" class="xtick">{escape(label)}</text>'
        )
    return parts


def _curves(plot: _Plot, curves: Sequence[Curve], to_x: object = None) -> list[str]:
    parts = []
    for index, curve in enumerate(curves):
        color = COLORS[index % len(COLORS)]
        coords = " ".join(
            f"{plot.x(to_x(x) if to_x else x):.1f},{plot.y(y):.1f}"  # type: ignore[operator]
            for x, y in curve.points
        )
        dash = ' stroke-dasharray="5 3"' if curve.dashed else ""
        label = escape(curve.label)
        parts.append(
            f'<polyline points="{coords}" fill="none" stroke="{color}" '
            f'stroke-width="1.6"{dash} class="curve" data-label="{label}"/>'
        )
        legend_y = TOP + 12 + index * LEGEND_STEP
        legend_x = WIDTH - RIGHT + 12
        parts.append(
            f'<line x1="{legend_x}" y1="{legend_y - 4}" x2="{legend_x + 16}" '
            f'y2="{legend_y - 4}" stroke="{color}" stroke-width="2"{dash}/>'
        )
        parts.append(
            f'<text x="{legend_x + 20}" y="{legend_y}" class="legend">'
            f"{escape(curve.label[:22])}</text>"
        )
    return parts


def _svg(parts: list[str], label: str, height: int = HEIGHT, kind: str = "chart") -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {height}" '
        f'class="{kind}" role="img" aria-label="{escape(label)}">' + "".join(parts) + "</svg>"
    )


def percentile_chart(title: str, curves: Sequence[Curve], unit: str = "ms") -> str:
    """Curves of (percentile, value): the percentile distribution, HdrHistogram style."""
    drawn = [curve for curve in curves if curve.points]
    if not drawn:
        return _empty(title)
    top = max(y for curve in drawn for _, y in curve.points)
    # the axis ends at the tick past the furthest percentile a curve reaches (its samples
    # end there), not at p99.9999 for every run
    reach = max(nines(p) for curve in drawn for p, _ in curve.points)
    x_top = min(MAX_NINES, max(2, math.ceil(reach - 1e-9)))
    plot = _Plot(x_top, top * 1.05)
    ticks = [
        (nines(p), "p0" if p == 0 else f"p{p:g}") for p in TICK_PERCENTILES if nines(p) <= x_top
    ]
    parts = _frame(title, plot, unit, ticks)
    parts += _curves(plot, drawn, nines)
    return _svg(parts, title)


MAX_SERIES_POINTS = 600  # a long run's series is thinned to this many points a curve


def thinned(
    points: list[tuple[float, float]], limit: int = MAX_SERIES_POINTS
) -> list[tuple[float, float]]:
    """At most ``limit`` points: each the last time and the largest value of its run of
    points, so an hour's series keeps its spikes and the file stays small."""
    if len(points) <= limit:
        return points
    size = math.ceil(len(points) / limit)
    return [
        (
            points[min(start + size, len(points)) - 1][0],
            max(y for _, y in points[start : start + size]),
        )
        for start in range(0, len(points), size)
    ]


def timeseries_chart(
    title: str, curves: Sequence[Curve], unit: str, shading: Shading | None = None
) -> str:
    """Curves of (seconds since the start, value), burst windows shaded, stalls marked."""
    curves = [Curve(c.label, thinned(c.points), c.dashed) for c in curves]
    drawn = [curve for curve in curves if curve.points]
    if not drawn:
        return _empty(title)
    x_max = max(x for curve in drawn for x, _ in curve.points)
    top = max((y for curve in drawn for _, y in curve.points), default=0)
    plot = _Plot(max(x_max, 1.0), top * 1.05)
    step = _nice_top(plot.x_max / 6)
    ticks = [(step * i, f"{_fmt(step * i)} s") for i in range(int(plot.x_max / step) + 1)]
    parts = _frame(title, plot, unit, ticks)
    shading = shading or Shading()
    parts += _shaded(plot, shading)
    parts += _curves(plot, drawn)
    parts += _shading_legend(shading, HEIGHT)
    return _svg(parts, title)


def _shaded(plot: _Plot, shading: Shading) -> list[str]:
    """The burst windows shaded and the stalls marked, under the curves."""
    parts = []
    for start, end in shading.spans:
        x0, x1 = plot.x(max(start, 0)), plot.x(min(end, plot.x_max))
        if x1 > x0:
            parts.append(
                f'<rect x="{x0:.1f}" y="{TOP}" width="{max(x1 - x0, 1):.1f}" '
                f'height="{plot.inner_h}" class="burst"/>'
            )
    for at in shading.marks:
        if 0 <= at <= plot.x_max:
            x = plot.x(at)
            parts.append(
                f'<line x1="{x:.1f}" y1="{TOP}" x2="{x:.1f}" y2="{TOP + 8}" class="stall"/>'
            )
    return parts


def _shading_legend(shading: Shading, height: int) -> list[str]:
    parts = []
    note_y = height - 6
    if shading.spans:
        parts.append(
            f'<rect x="{LEFT}" y="{note_y - 9}" width="12" height="10" class="burst"/>'
            f'<text x="{LEFT + 16}" y="{note_y}" class="legend">'
            f"{escape(shading.span_label)}</text>"
        )
    if shading.marks:
        parts.append(
            f'<line x1="{LEFT + 130}" y1="{note_y - 9}" x2="{LEFT + 130}" '
            f'y2="{note_y + 1}" class="stall"/><text x="{LEFT + 136}" y="{note_y}" '
            f'class="legend">{escape(shading.mark_label)}</text>'
        )
    return parts


def load_chart(
    title: str,
    curves: Sequence[Curve],
    unit: str,
    knee: dict[str, Any] | None = None,
    limits: Sequence[tuple[str, float]] = (),
) -> str:
    """Curves of (load, value) over a sweep's steps, the knee marked: where SLOs break;
    ``limits``: the SLOs the knee was found against, each a labelled horizontal line."""
    drawn = [curve for curve in curves if curve.points]
    if not drawn:
        return _empty(title)
    loads = sorted({x for curve in drawn for x, _ in curve.points})
    top = max([y for curve in drawn for _, y in curve.points] + [v for _, v in limits])
    plot = _Plot(max(loads), top * 1.05, x_min=min(loads) if len(loads) > 1 else 0.0)
    parts = _frame(title, plot, unit, [(x, _fmt(x)) for x in loads])
    for label, value in limits:
        y = plot.y(value)
        parts.append(
            f'<line x1="{LEFT}" y1="{y:.1f}" x2="{LEFT + plot.inner_w}" y2="{y:.1f}" '
            f'class="stall" stroke-dasharray="6 3"/><text x="{LEFT + 4}" '
            f'y="{y - 4:.1f}" class="legend">{escape(label)}</text>'
        )
    if knee is not None and plot.x_min <= knee["value"] <= plot.x_max:
        x = plot.x(knee["value"])
        parts.append(
            f'<line x1="{x:.1f}" y1="{TOP}" x2="{x:.1f}" y2="{TOP + plot.inner_h}" '
            f'class="stall"/><text x="{x + 4:.1f}" y="{TOP + 12}" class="legend">'
            "knee</text>"
        )
    parts += _curves(plot, drawn)
    return _svg(parts, title)


def _empty(title: str, height: int = HEIGHT, kind: str = "chart") -> str:
    parts = [
        f'<text x="{LEFT}" y="16" class="title">{escape(title)}</text>',
        f'<text x="{LEFT}" y="60" class="legend">no samples yet</text>',
    ]
    return _svg(parts, title, height, kind)


# A timeline's series is thinned to this many points (a panel is ~500 px wide; each kept
# point the largest of its run, so spikes stay), its dots to the largest this many.
MAX_TIMELINE_POINTS = 1000
PANEL_HEIGHT = 150  # a panel under the timeline's top one
DOT_CLASSES = ("gap-prefill", "gap-server", "gap-client", "gap-none")


@dataclass
class Dot:
    """One point drawn as a dot (a tail gap): its css class (one of ``DOT_CLASSES``) and
    a tooltip ('' for none)."""

    x: float
    y: float
    kind: str = "gap-none"
    tip: str = ""
    big: bool = False  # one of the worst: drawn larger


@dataclass
class Rule:
    """A horizontal line across a panel at ``value`` (a threshold), labelled."""

    value: float
    label: str


def step_points(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """A series drawn as steps: each value holds until the next point's x."""
    stepped: list[tuple[float, float]] = []
    for index, (x, y) in enumerate(points):
        if index:
            stepped.append((x, points[index - 1][1]))
        stepped.append((x, y))
    return stepped


def _largest_dots(dots: Sequence[Dot], limit: int) -> list[Dot]:
    if len(dots) <= limit:
        return list(dots)
    return sorted(dots, key=lambda dot: (dot.big, dot.y), reverse=True)[:limit]


def timeline_panel(
    title: str,
    curves: Sequence[Curve],
    unit: str,
    x_max: float,
    *,
    shading: Shading | None = None,
    dots: Sequence[Dot] = (),
    dot_legend: Sequence[tuple[str, str]] = (),
    rules: Sequence[Rule] = (),
    steps: bool = False,
    y_max: float | None = None,
    height: int = PANEL_HEIGHT,
) -> str:
    """One panel of the tail's timeline: curves of (seconds since the run's start, value)
    over ``[0, x_max]`` (every panel of one timeline gets the same ``x_max``, so they line
    up), each thinned to ``MAX_TIMELINE_POINTS``; ``dots`` (the largest as many); horizontal
    ``rules``; ``steps``: each curve as a step line; ``y_max``: a fixed top (KV usage)."""
    drawn = []
    for curve in curves:
        points = thinned([p for p in curve.points if 0 <= p[0] <= x_max], MAX_TIMELINE_POINTS)
        if points:
            drawn.append(Curve(curve.label, step_points(points) if steps else points, curve.dashed))
    shown = _largest_dots([d for d in dots if 0 <= d.x <= x_max], MAX_TIMELINE_POINTS)
    if not drawn and not shown:
        return _empty(title, height, "chart timeline")
    top = y_max
    if top is None:
        values = [y for curve in drawn for _, y in curve.points] + [d.y for d in shown]
        top = max(values, default=0) * 1.05  # a rule above the data is left out
    plot = _Plot(max(x_max, 1.0), top, height=height)
    step = _nice_top(plot.x_max / 6)
    ticks = [(step * i, f"{_fmt(step * i)} s") for i in range(int(plot.x_max / step) + 1)]
    parts = _frame(title, plot, unit, ticks)
    shading = shading or Shading()
    parts += _shaded(plot, shading)
    shown_rules = [rule for rule in rules if 0 <= rule.value <= plot.y_max]
    for rule in shown_rules:  # labelled in the legend: a label inside the plot sat on a curve
        y = plot.y(rule.value)
        parts.append(
            f'<line x1="{LEFT}" y1="{y:.1f}" x2="{LEFT + plot.inner_w}" y2="{y:.1f}" class="rule"/>'
        )
    parts += _curves(plot, drawn)
    for dot in sorted(shown, key=lambda d: d.big):  # the worst on top
        kind = dot.kind if dot.kind in DOT_CLASSES else "gap-none"
        radius = 4 if dot.big else 2.2
        circle = (
            f'<circle cx="{plot.x(dot.x):.1f}" cy="{plot.y(dot.y):.1f}" r="{radius}" '
            f'class="gap {kind}{" worst" if dot.big else ""}"'
        )
        parts.append(
            f"{circle}><title>{escape(dot.tip)}</title></circle>" if dot.tip else f"{circle}/>"
        )
    legend_x = WIDTH - RIGHT + 12
    entries = len(drawn)
    for rule in shown_rules:
        legend_y = TOP + 12 + entries * LEGEND_STEP
        if legend_y > height - 4:
            break
        entries += 1
        parts.append(
            f'<line x1="{legend_x}" y1="{legend_y - 4}" x2="{legend_x + 16}" '
            f'y2="{legend_y - 4}" class="rule"/><text x="{legend_x + 20}" y="{legend_y}" '
            f'class="legend rule-label">{escape(rule.label[:22])}</text>'
        )
    for kind, label in dot_legend:
        legend_y = TOP + 12 + entries * LEGEND_STEP
        if legend_y > height - 4:
            break
        entries += 1
        parts.append(
            f'<circle cx="{legend_x + 8}" cy="{legend_y - 4}" r="3.5" '
            f'class="gap {escape(kind)}"/><text x="{legend_x + 20}" y="{legend_y}" '
            f'class="legend">{escape(label[:22])}</text>'
        )
    parts += _shading_legend(shading, height)
    return _svg(parts, title, height, "chart timeline")


# Shared by the HTML report and the web UI's charts page (inline, so both work offline).
CHART_CSS = """
svg.chart { width: 100%; max-width: 720px; height: auto; font: 13px sans-serif; }
svg.chart .title { font-weight: bold; font-size: 14px; }
svg.chart .legend { font-size: 12px; }
svg.chart .frame { fill: none; stroke: #888; }
svg.chart .grid { stroke: #e4e4e4; }
svg.chart .ytick { text-anchor: end; fill: #444; }
svg.chart .xtick { text-anchor: middle; fill: #444; }
svg.chart .unit { text-anchor: middle; fill: #444; }
svg.chart .legend { fill: #222; }
svg.chart .burst { fill: #f5a623; fill-opacity: 0.18; }
svg.chart .stall { stroke: #c00; stroke-width: 2; }
svg.chart .rule { stroke: #b00020; stroke-dasharray: 4 3; }
svg.chart .rule-label { fill: #b00020; }
svg.chart .gap { fill-opacity: 0.75; stroke: none; }
svg.chart .gap.worst { fill-opacity: 1; stroke: #000; stroke-width: 0.8; }
svg.chart .gap-prefill { fill: #ff7f0e; } svg.chart .gap-server { fill: #9467bd; }
svg.chart .gap-client { fill: #d62728; } svg.chart .gap-none { fill: #7f7f7f; }
.timeline { display: flex; flex-direction: column; max-width: 720px; }
.timeline svg.chart { width: 100%; }
"""
