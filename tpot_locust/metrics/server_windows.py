"""Server cause windows and the summary's series, from the metrics sampler's sample lines.

``server_state.scraper`` prints one line per good sample of the server's ``/metrics`` (raw
numbers: gauges, counter totals, per-interval increases). Here, pure functions of those
lines:

- ``server_windows(previous, current)``: the cause windows (``metrics.causes``) of the
  interval between two consecutive good samples, spanning ``[previous, current]`` wall
  time: ``preemption`` where the preemption counter rose (size: the increase; a counter
  that went down is a server restart, not a rise), ``kv_pressure`` where KV cache usage at
  either end is at or above ``KV_PRESSURE_AT`` (size: the larger usage), ``queueing``
  where requests waited at either end (size: the most waiting), ``server_gc`` where the
  server's Python process counted more full collections (size: how many), ``gpu_throttle``
  where a DCGM exporter's clock event reasons had a slowing one set at either end (size:
  the lowest SM clock), ``kv_offload`` where the server's count of KV brought back from CPU
  memory or stored to it rose (size: how much, both ways). Ids are
  ``server:<kind>:<index of the current sample>``: unique in a run and the same in every
  process that derives them.
- ``SeriesReducer`` / ``downsample``: the series for ``summary.json`` in at most
  ``MAX_POINTS`` points, in bounded memory however long the run: consecutive samples are
  merged into spans (gauges: the span's largest, a peak is what a tail gap meets;
  preemptions: summed; token rates: tokens over time), the span doubling whenever the
  points would pass the limit.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tpot_locust.common.run_facts import GpuSummary
from tpot_locust.metrics.causes import (
    GPU_THROTTLE,
    KV_OFFLOAD,
    KV_PRESSURE,
    KV_PRESSURE_AT,
    PREEMPTION,
    QUEUEING,
    SERVER_GC,
    CauseWindow,
)

MAX_POINTS = 2000
SERIES = (
    "t_wall_s",
    "running",
    "waiting",
    "kv_usage",
    "preemptions",
    "prompt_tokens_per_s",
    "generation_tokens_per_s",
    "itl_p99_low_ms",
    "itl_p99_high_ms",
)
# a point's largest: the gauges, and the bounds of the server's own ITL p99 per interval
_PEAKS = ("running", "waiting", "kv_usage", "itl_p99_low_ms", "itl_p99_high_ms")
_RATES = ("prompt_tokens_per_s", "generation_tokens_per_s")


def _value(line: Mapping[str, Any], name: str) -> float | None:
    """A finite number of the line, else None (absent, null, or not a number)."""
    value = line.get(name)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _ns(seconds: float) -> int:
    return round(seconds * 1e9)


def _largest(previous: Mapping[str, Any], current: Mapping[str, Any], name: str) -> float | None:
    values = [v for v in (_value(previous, name), _value(current, name)) if v is not None]
    return max(values) if values else None


def server_windows(previous: Mapping[str, Any], current: Mapping[str, Any]) -> list[CauseWindow]:
    """The server windows of the interval from ``previous`` to ``current`` (two consecutive
    good sample lines); none where the interval has no positive length."""
    start_s, end_s = _value(previous, "t_wall_s"), _value(current, "t_wall_s")
    if start_s is None or end_s is None or end_s <= start_s:
        return []
    index = current.get("i")
    start, end = _ns(start_s), _ns(end_s)
    windows: list[CauseWindow] = []

    def add(kind: str, size: float) -> None:
        windows.append(CauseWindow(kind, f"server:{kind}:{index}", start, end, size))

    before, after = _value(previous, "preemptions_total"), _value(current, "preemptions_total")
    same_engine = previous.get("engine") == current.get("engine")
    if same_engine and before is not None and after is not None and after > before:
        add(PREEMPTION, after - before)
    usage = _largest(previous, current, "kv_usage")
    if usage is not None and usage >= KV_PRESSURE_AT:
        add(KV_PRESSURE, usage)
    waiting = _largest(previous, current, "waiting")
    if waiting is not None and waiting > 0:
        add(QUEUEING, waiting)
    before, after = (
        _value(previous, "gc_collections_total"),
        _value(current, "gc_collections_total"),
    )
    if same_engine and before is not None and after is not None and after > before:
        add(SERVER_GC, after - before)  # its Python process ran a full collection
    moved = [
        after - before
        for before, after in (
            (_value(previous, name), _value(current, name))
            for name in ("kv_loaded_total", "kv_stored_total")
        )
        if before is not None and after is not None and after > before
    ]
    if same_engine and moved:
        add(KV_OFFLOAD, sum(moved))  # KV cache moved to or back from CPU memory
    gpus = [line.get("gpu") for line in (previous, current)]
    if any(isinstance(gpu, Mapping) and gpu.get("slowing") for gpu in gpus):
        clocks = [_value(gpu, "sm_clock_mhz") for gpu in gpus if isinstance(gpu, Mapping)]
        known = [clock for clock in clocks if clock is not None]
        add(GPU_THROTTLE, min(known) if known else 0.0)  # its clocks were held down
    return windows


@dataclass
class _Span:
    """Consecutive samples merged into one point."""

    count: int = 0
    t_wall_s: float | None = None  # the span's last sample: the end of what it covers
    peaks: dict[str, float] = field(default_factory=dict)
    preemptions: float | None = None
    tokens: dict[str, float] = field(default_factory=dict)  # rate x dt, summed
    seconds: dict[str, float] = field(default_factory=dict)  # dt where the rate is known

    def add(self, line: Mapping[str, Any]) -> None:
        self.count += 1
        self.t_wall_s = _value(line, "t_wall_s")
        for name in _PEAKS:
            value = _value(line, name)
            if value is not None:
                self.peaks[name] = max(value, self.peaks.get(name, value))
        preemptions = _value(line, "preemptions")
        if preemptions is not None:
            self.preemptions = (self.preemptions or 0.0) + preemptions
        dt = _value(line, "dt_s")
        for name in _RATES:
            rate = _value(line, name)
            if rate is not None and dt is not None and dt > 0:
                self.tokens[name] = self.tokens.get(name, 0.0) + rate * dt
                self.seconds[name] = self.seconds.get(name, 0.0) + dt

    def merge(self, later: _Span) -> None:
        self.count += later.count
        self.t_wall_s = later.t_wall_s if later.t_wall_s is not None else self.t_wall_s
        for name, value in later.peaks.items():
            self.peaks[name] = max(value, self.peaks.get(name, value))
        if later.preemptions is not None:
            self.preemptions = (self.preemptions or 0.0) + later.preemptions
        for name, tokens in later.tokens.items():
            self.tokens[name] = self.tokens.get(name, 0.0) + tokens
            self.seconds[name] = self.seconds.get(name, 0.0) + later.seconds[name]

    def point(self) -> dict[str, float | None]:
        point: dict[str, float | None] = {"t_wall_s": self.t_wall_s}
        for name in _PEAKS:
            point[name] = self.peaks.get(name)
        point["preemptions"] = self.preemptions
        for name in _RATES:
            seconds = self.seconds.get(name, 0.0)
            point[name] = round(self.tokens[name] / seconds, 3) if seconds > 0 else None
        return point


class SeriesReducer:
    """The summary's series of a run's sample lines, in at most ``max_points`` points and
    bounded memory: ``add`` each good sample line in order, ``series()`` at any time."""

    def __init__(self, max_points: int = MAX_POINTS) -> None:
        if max_points < 2:
            raise ValueError("max_points must be >= 2")
        self.max_points = max_points
        self.span = 1  # samples per point
        self.spans: list[_Span] = []

    def add(self, line: Mapping[str, Any]) -> None:
        if not self.spans or self.spans[-1].count >= self.span:
            self.spans.append(_Span())
        self.spans[-1].add(line)
        if len(self.spans) > self.max_points:
            merged = []
            for index in range(0, len(self.spans), 2):
                first = self.spans[index]
                if index + 1 < len(self.spans):
                    first.merge(self.spans[index + 1])
                merged.append(first)
            self.spans = merged
            self.span *= 2

    def series(self) -> dict[str, list[float | None]]:
        """``{"t_wall_s": [...], "running": [...], ...}`` (``SERIES``), one value per point;
        None where the server does not export a series."""
        points = [span.point() for span in self.spans]
        return {name: [point[name] for point in points] for name in SERIES}


def downsample(
    lines: Iterable[Mapping[str, Any]], max_points: int = MAX_POINTS
) -> dict[str, list[float | None]]:
    """The series of ``lines`` (good sample lines, in order) in at most ``max_points``."""
    reducer = SeriesReducer(max_points)
    for line in lines:
        reducer.add(line)
    return reducer.series()


@dataclass
class GpuFigures:
    """A DCGM exporter's samples over a run, for its line in the report: the SM clock's
    range, the most power and heat, the samples with a slowing clock event reason and which,
    the XID errors seen (``server_state.dcgm_page`` sample lines' ``gpu``)."""

    samples: int = 0
    slowed: int = 0
    gpus: int = 0
    sm_clock_mhz: list[float] = field(default_factory=list)  # [lowest, highest] so far
    power_w: float | None = None
    temp_c: float | None = None
    reasons: list[str] = field(default_factory=list)
    xids: list[int] = field(default_factory=list)
    # the lowest SM clock over time, for the tail's timeline: [t_wall_s, MHz] points, at most
    # MAX_POINTS (two neighbours merged into their later time and lower clock when full)
    clock_series: list[list[float]] = field(default_factory=list)

    def add(self, line: Mapping[str, Any]) -> None:
        gpu = line.get("gpu")
        if not isinstance(gpu, Mapping):
            return
        self.samples += 1
        at, clock_now = _value(line, "t_wall_s"), _value(gpu, "sm_clock_mhz")
        if at is not None and clock_now is not None:
            self.clock_series.append([at, clock_now])
            if len(self.clock_series) > MAX_POINTS:
                pairs = zip(self.clock_series[::2], self.clock_series[1::2], strict=False)
                merged = [[b[0], min(a[1], b[1])] for a, b in pairs]
                if len(self.clock_series) % 2:
                    merged.append(self.clock_series[-1])
                self.clock_series = merged
        gpus = gpu.get("gpus")
        if isinstance(gpus, int) and not isinstance(gpus, bool):
            self.gpus = max(self.gpus, gpus)
        clock = _value(gpu, "sm_clock_mhz")
        if clock is not None:
            low, high = self.sm_clock_mhz or [clock, clock]
            self.sm_clock_mhz = [min(low, clock), max(high, clock)]
        for name in ("power_w", "temp_c"):
            value = _value(gpu, name)
            if value is not None:
                setattr(self, name, max(value, getattr(self, name) or value))
        slowing = [r for r in gpu.get("slowing") or () if isinstance(r, str)]
        self.slowed += bool(slowing)
        self.reasons += [r[:64] for r in slowing if r not in self.reasons][:16]
        xid = gpu.get("xid")
        if isinstance(xid, int) and not isinstance(xid, bool) and xid and xid not in self.xids:
            self.xids = [*self.xids, xid][:16]

    def summary(self) -> GpuSummary | None:
        """``run["gpu_metrics"][label]["gpu"]``; None before any GPU sample."""
        if not self.samples:
            return None
        return {
            "samples": self.samples,
            "gpus": self.gpus,
            "sm_clock_mhz": self.sm_clock_mhz,
            "power_w_max": self.power_w,
            "temp_c_max": self.temp_c,
            "slowed_samples": self.slowed,
            "slowing_reasons": self.reasons,
            "xid_errors": self.xids,
            "sm_clock_series": self.clock_series,
        }
