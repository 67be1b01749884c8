"""A running test's time sections, kept as it goes: the live TPOT tab's 95 % intervals.

A finished run's intervals come from its interval logs (``report.run_intervals``); a running
test's figures are the collector's totals so far, so their intervals need the same slices
so far, without reading the logs back on every poll. Kept here per scope (all classes
merged, and each class where there are several) and metric: at most ``2 x SECTIONS`` blocks
of whole report intervals, all of one width. The open block is a histogram that each closed
interval adds into; a full block keeps only its non-zero buckets, compressed (a few KB,
where a histogram holds 23,552 buckets, 184 KB); when ``2 x SECTIONS`` are full, neighbours
merge pairwise and the width doubles. So a day's test holds ~25 blobs a metric, and its
sections (at most ``SECTIONS``: ``metrics.intervals``) are contiguous runs of whole report
intervals, as a finished run's are.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Mapping
from dataclasses import replace

import numpy as np
from hdrh.histogram import HdrHistogram

from tpot_locust.common.cooperation import let_streams_run
from tpot_locust.metrics.histograms import add_into, counts_length, counts_view, new_histogram
from tpot_locust.metrics.intervals import SECTIONS, PercentileInterval, section_intervals
from tpot_locust.metrics.metric_set import ClassMetrics

MAX_BLOCKS = 2 * SECTIONS
Scope = str | None  # a class's name; None: every class merged
# a key's intervals as last read: at which (blocks, width), and around which figures (us)
_Read = tuple[tuple[int, int], dict[float, PercentileInterval], dict[float, float]]


class LiveSections:
    """The blocks of every scope and metric so far (one width for all of them)."""

    def __init__(self, metrics: tuple[str, ...]) -> None:
        self.metrics = metrics
        self.started_wall_s = time.time()  # its figures' start: the test's, or a reset's
        self.width = 1  # report intervals a full block holds
        self._in_open = 0  # intervals added into the open blocks
        self._full: dict[tuple[Scope, str], list[bytes]] = {}  # b"": an empty block
        self._open: dict[tuple[Scope, str], HdrHistogram] = {}
        self._blocks = 0  # full blocks, every key alike
        self._read: dict[tuple[Scope, str], _Read] = {}

    def add(self, combined: ClassMetrics, by_class: dict[str, ClassMetrics]) -> None:
        """One closed report interval: all classes merged, and each class's own (a class
        alone in an interval still has its slice: its sections are all its intervals)."""
        scopes: list[tuple[Scope, ClassMetrics]] = [(None, combined), *by_class.items()]
        for scope, metrics in scopes:
            for name in self.metrics:
                histogram = metrics.histograms.get(name)
                if histogram is not None and histogram.total_count:
                    add_into(self._open.setdefault((scope, name), new_histogram()), histogram)
        self._in_open += 1
        if self._in_open == self.width:
            self._close_open()

    def _close_open(self) -> None:
        for key in self._full.keys() | self._open.keys():
            opened = self._open.get(key)
            # a scope that sent nothing in a block has an empty one, so blocks stay aligned
            block = b"" if opened is None else _packed(counts_view(opened))
            self._full.setdefault(key, [b""] * self._blocks).append(block)
        self._open, self._in_open, self._blocks = {}, 0, self._blocks + 1
        if self._blocks == MAX_BLOCKS:
            for key, blocks in self._full.items():
                pairs = zip(blocks[::2], blocks[1::2], strict=True)
                self._full[key] = [_merged(first, second) for first, second in pairs]
                let_streams_run()
            self._blocks, self.width = MAX_BLOCKS // 2, self.width * 2

    def intervals(
        self, scope: Scope, name: str, figures_us: Mapping[float, float]
    ) -> dict[float, PercentileInterval]:
        """Each percentile's 95 % interval around its figure so far (``figures_us``) of
        ``scope``'s ``name``, from its blocks (the one under way part of the last). Read
        again only when a block has closed since (a few ms a metric, polled every 2 s by
        every open tab): till then the last spread, centred on the figure now."""
        version = (self._blocks, self.width)
        cached = self._read.get((scope, name))
        if cached is not None and cached[0] == version and cached[1].keys() == figures_us.keys():
            return {
                p: _recentred(cached[1][p], cached[2][p], whole) for p, whole in figures_us.items()
            }
        found = self._intervals(scope, name, figures_us)
        self._read[(scope, name)] = (version, found, dict(figures_us))
        return found

    def _intervals(
        self, scope: Scope, name: str, figures_us: Mapping[float, float]
    ) -> dict[float, PercentileInterval]:
        blocks = [block for block in self._full.get((scope, name), []) if block]
        opened = self._open.get((scope, name))
        under_way = None if opened is None else counts_view(opened).astype(np.int64)
        parts = np.array_split(np.arange(len(blocks)), min(SECTIONS, len(blocks))) if blocks else []
        counts = np.zeros((max(len(parts), under_way is not None), counts_length()), np.int64)
        for row, part in zip(counts, parts, strict=False):
            for index in part:
                _add_packed(row, blocks[int(index)])
        if under_way is not None:
            counts[-1] += under_way
        elapsed_s = time.time() - self.started_wall_s
        return section_intervals(counts, figures_us, elapsed_s)


def _recentred(interval: PercentileInterval, was_us: float, now_us: float) -> PercentileInterval:
    """The same half-width around the figure now."""
    if interval.high_ms is None:
        return interval
    half_us = interval.high_ms * 1000 - was_us
    low_ms, high_ms = (
        round(max(now_us - half_us, 0.0) / 1000, 4),
        round((now_us + half_us) / 1000, 4),
    )
    return replace(interval, low_ms=low_ms, high_ms=high_ms)


def _packed(counts: np.ndarray) -> bytes:
    """A block's non-zero buckets: their indexes (< 65,536) and counts, compressed."""
    indexes = np.flatnonzero(counts)
    if not indexes.size:
        return b""
    raw = indexes.astype(np.uint16).tobytes() + counts[indexes].astype(np.int64).tobytes()
    return zlib.compress(raw, 1)


def _unpacked(block: bytes) -> tuple[np.ndarray, np.ndarray]:
    raw = zlib.decompress(block)
    size = len(raw) // 10  # 2 bytes an index, 8 a count
    indexes = np.frombuffer(raw[: 2 * size], dtype=np.uint16).astype(np.int64)
    return indexes, np.frombuffer(raw[2 * size :], dtype=np.int64)


def _add_packed(counts: np.ndarray, block: bytes) -> None:
    """A packed block's counts added into ``counts`` (b"": none)."""
    if block:
        indexes, values = _unpacked(block)
        counts[indexes] += values  # a block's indexes are distinct


def _merged(first: bytes, second: bytes) -> bytes:
    counts = np.zeros(counts_length(), dtype=np.int64)
    _add_packed(counts, first)
    _add_packed(counts, second)
    return _packed(counts)


__all__ = ["MAX_BLOCKS", "LiveSections"]
