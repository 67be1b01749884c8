"""Histogram deltas on the wire between worker and master: each one's span of buckets, added
to the master's totals as one slice.

A busy worker's 1 s delta has ~20 histograms; decoding each as an ``HdrHistogram`` (base64,
zlib, a fresh 184 KiB counts array, a Python pass over its buckets) cost the master ~3 ms a
report. Here a group's histograms travel as one block: per histogram the buckets from its
first nonzero one to its last (a token gap histogram's ~3,000 nonzero buckets lie in a span
of ~4,000) in the narrowest unsigned width that holds its largest count, zlib-compressed
together. The master reads each span as a numpy view of the inflated bytes and adds it
into its totals' counts array as one slice (``BucketSpan.add_to``). Everything is checked
before anything is added: sizes bounded, spans inside our layout and trimmed (first and
last bucket nonzero), counts and totals no larger than any run's.

Exact: a histogram added this way equals the one ``HdrHistogram.decode`` of its V2 blob
added (counts, total, and min/max as that decode sets them: its first and last bucket).
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
from hdrh.histogram import HdrHistogram

from tpot_locust.metrics.histograms import (
    MAX_BUCKET_COUNT,
    HistogramDecodeError,
    bucket_bounds,
    counts_length,
    counts_view,
    new_histogram,
)

MAX_HISTOGRAMS = 4096  # in one delta; a metric group has ~30 (causes, stall copies)
MAX_BLOCK_BYTES = 32 << 20  # their spans inflated (a busy group's: ~20 kB)
MAX_NAME_CHARS = 200
COMPRESSION_LEVEL = 6  # ~0.2 ms a busy group on the worker; half of level 1's bytes
_WIDTHS: dict[int, np.dtype[np.unsignedinteger[Any]]] = {
    1: np.dtype("<u1"), 2: np.dtype("<u2"), 4: np.dtype("<u4"), 8: np.dtype("<u8"),
}  # fmt: skip
_KEYS = ("owners", "names", "first", "widths", "lengths")


@dataclass(frozen=True)
class BucketSpan:
    """One histogram's buckets from its first nonzero one (``first``) to its last."""

    first: int
    counts: np.ndarray  # unsigned, its first and last > 0
    total_count: int
    min_value: int  # as ``HdrHistogram.decode`` sets them: its first bucket's lowest value
    max_value: int  # and its last bucket's highest

    def add_to(self, histogram: HdrHistogram) -> None:
        """Exact merge into a histogram of our layout (``histograms.add_into``'s rule)."""
        counts_view(histogram)[self.first : self.first + self.counts.size] += self.counts
        histogram.total_count += self.total_count
        histogram.min_value = min(histogram.min_value, self.min_value)
        histogram.max_value = max(histogram.max_value, self.max_value)

    def to_histogram(self) -> HdrHistogram:
        histogram = new_histogram()
        self.add_to(histogram)
        return histogram


class _Packed(NamedTuple):
    owner: int
    name: str
    first: int
    width: int
    span: np.ndarray


def pack_spans(histograms: Iterable[tuple[int, str, HdrHistogram]]) -> dict[str, Any]:
    """Non-empty histograms, each named by its owner (an index the reader knows: a metric
    group) and its name, as one block (msgpack-safe: lists and bytes). The spans' bytes
    are laid out by width (stably), so that the reader takes each width's as one array."""
    packed: list[_Packed] = []
    for owner, name, histogram in histograms:
        if not histogram.total_count:
            continue
        if histogram.counts_len != counts_length():
            raise ValueError(f"histogram {name!r} is not of this tool's layout")
        view = counts_view(histogram)
        nonzero = np.flatnonzero(view)
        span = view[nonzero[0] : nonzero[-1] + 1]
        largest = int(span.max())
        width = next(w for w, dtype in _WIDTHS.items() if largest <= np.iinfo(dtype).max)
        packed.append(_Packed(owner, name, int(nonzero[0]), width, span))
    laid_out = sorted(packed, key=lambda item: item.width)  # stable: as listed, per width
    raw = b"".join(item.span.astype(_WIDTHS[item.width]).tobytes() for item in laid_out)
    return {"owners": [item.owner for item in packed], "names": [item.name for item in packed],
            "first": [item.first for item in packed], "widths": [item.width for item in packed],
            "lengths": [item.span.size for item in packed],
            "data": zlib.compress(raw, COMPRESSION_LEVEL)}  # fmt: skip


def unpack_spans(block: Any, owners: int) -> list[tuple[int, str, BucketSpan]]:
    """A block read back (``owners``: how many the reader knows), every part checked;
    ``HistogramDecodeError`` says what is wrong."""
    if not isinstance(block, dict):
        raise HistogramDecodeError("histograms: not a block of histograms")
    listed, firsts, widths, lengths = _checked_lists(block, owners)
    data = block.get("data")
    if not isinstance(data, bytes):
        raise HistogramDecodeError("histograms: no data")
    raw = _inflate_exactly(data, sum(w * n for w, n in zip(widths, lengths, strict=True)))
    spans: list[BucketSpan | None] = [None] * len(listed)
    offset = 0
    for width in sorted(set(widths)):  # each width's spans: one array, checked at once
        chosen = [i for i, w in enumerate(widths) if w == width]
        sizes = np.array([lengths[i] for i in chosen])
        counts = np.frombuffer(raw, _WIDTHS[width], int(sizes.sum()), offset)
        offset += counts.nbytes
        read = _read_spans([firsts[i] for i in chosen], sizes, counts)
        for index, span in zip(chosen, read, strict=True):
            spans[index] = span
    return [(owner, name, span) for (owner, name), span in zip(listed, spans, strict=True)
            if span is not None]  # fmt: skip


def _checked_lists(
    block: dict[str, Any], owners: int
) -> tuple[list[tuple[int, str]], list[int], list[int], list[int]]:
    """The block's lists: as long as each other and bounded, each histogram named once,
    each span inside our layout."""
    parts: list[Any] = [block.get(key) for key in _KEYS]  # checked next
    if not all(isinstance(part, list) for part in parts) or len(parts[0]) > MAX_HISTOGRAMS:
        raise HistogramDecodeError(f"histograms: not lists of at most {MAX_HISTOGRAMS}")
    if len({len(part) for part in parts}) != 1:
        raise HistogramDecodeError("histograms: lists of different lengths")
    owners_of, names, firsts, widths, lengths = parts
    listed = list(zip(owners_of, names, strict=True))
    size = 0
    for (owner, name), first, width, length in zip(listed, firsts, widths, lengths, strict=True):
        if not (type(owner) is type(first) is type(width) is type(length) is int
                and 0 <= owner < owners and width in _WIDTHS):  # fmt: skip
            raise HistogramDecodeError("histograms: a span that is not one")
        if not (isinstance(name, str) and 0 < len(name) <= MAX_NAME_CHARS):
            raise HistogramDecodeError("histograms: a name that is not a short text")
        if not (0 <= first and 0 < length and first + length <= counts_length()):
            raise HistogramDecodeError(f"histograms.{name}: a span outside this tool's layout")
        size += width * length
    if len(set(listed)) != len(listed):
        raise HistogramDecodeError("histograms: a histogram twice")
    if size > MAX_BLOCK_BYTES:
        raise HistogramDecodeError(f"histograms: {size:,} bytes of counts, more than any "
                                   "delta of this tool")  # fmt: skip
    return listed, firsts, widths, lengths


def _read_spans(firsts: list[int], sizes: np.ndarray, counts: np.ndarray) -> list[BucketSpan]:
    """Spans of one width laid end to end in ``counts``: trimmed, counts and totals bounded."""
    ends = np.cumsum(sizes)
    starts = ends - sizes
    if not (counts[starts].all() and counts[ends - 1].all()):
        raise HistogramDecodeError("histograms: a span that is not trimmed")
    if counts.dtype.itemsize == 8 and int(counts.max()) > MAX_BUCKET_COUNT:
        raise HistogramDecodeError("histograms: a count beyond any run's")
    counts = counts.astype(np.uint64)  # as the histograms' own: adding them is then ~2x faster
    totals = np.add.reduceat(counts, starts)  # < 2**63: 23,552 buckets of < 2**48
    if int(totals.max()) > MAX_BUCKET_COUNT:
        raise HistogramDecodeError("histograms: a total beyond any run's")
    lasts = [first + size - 1 for first, size in zip(firsts, sizes.tolist(), strict=True)]
    lowest, highest = bucket_bounds(firsts, lasts)
    return [
        BucketSpan(first, counts[start:end], total, low, high)
        for first, start, end, total, low, high in zip(
            firsts, starts.tolist(), ends.tolist(), totals.tolist(), lowest, highest,
            strict=True,
        )
    ]  # fmt: skip


def _inflate_exactly(data: bytes, size: int) -> bytes:
    """zlib that must give exactly ``size`` bytes, never more than that inflated (a bomb)."""
    inflater = zlib.decompressobj()
    try:
        raw = inflater.decompress(data, size + 1)
    except zlib.error as error:
        raise HistogramDecodeError(f"histograms: not valid data (zlib: {error})") from None
    complete = inflater.eof and not (inflater.unconsumed_tail or inflater.unused_data)
    if len(raw) != size or not complete:
        raise HistogramDecodeError(
            f"histograms: the data is not the {size:,} bytes its spans say (truncated, or more)"
        )
    return raw
