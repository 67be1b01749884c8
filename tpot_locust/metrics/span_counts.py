"""Histogram deltas on the wire between worker and master: each one's span of buckets, added
to the master's totals as one slice.

A busy worker's 1 s delta has ~20 histograms; decoding each as an ``HdrHistogram`` (base64,
zlib, a fresh 184 KiB counts array, a Python pass over its buckets) cost the master ~3 ms a
report. Here a delta's histograms travel as one block: per histogram the buckets from its
first nonzero one to its last (a token gap histogram's ~3,000 nonzero buckets lie in a span
of ~4,000) in the narrowest unsigned width that holds its largest count, zlib-compressed
together (~4.5 kB a busy delta, a quarter of the V2 blobs' base64). The master reads each
span as a numpy view of the inflated bytes and adds it into its totals' counts array as
one slice (``BucketSpan.add_to``). A span equal to an earlier one (ITL and TPOT where each
event carries one token; a metric's unexplained part where no cause is known) travels as
that one's index (``copy_of``). Everything is checked
before anything is added: sizes bounded, spans inside our layout and trimmed (first and
last bucket nonzero), counts and totals no larger than any run's.

Exact: a histogram added this way equals the one ``HdrHistogram.decode`` of its V2 blob
added (counts, total, and min/max as that decode sets them: its first and last bucket).
"""

from __future__ import annotations

import operator
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import chain
from typing import Any, NamedTuple

import numpy as np
from hdrh.histogram import HdrHistogram

from tpot_locust.common.cooperation import let_streams_run
from tpot_locust.metrics.histograms import (
    MAX_BUCKET_COUNT,
    HistogramDecodeError,
    bucket_bounds,
    counts_length,
    counts_view,
    new_histogram,
)

MAX_HISTOGRAMS = 4096  # in one delta; a metric group has ~30 (causes, stall copies)
MAX_BLOCK_BYTES = 32 << 20  # their spans inflated (a busy delta's: ~40 kB)
MAX_NAME_CHARS = 200
COMPRESSION_LEVEL = 6  # ~0.5 ms a busy delta on the worker; half of level 1's bytes
_WIDTHS: dict[int, np.dtype[np.unsignedinteger[Any]]] = {
    1: np.dtype("<u1"),
    2: np.dtype("<u2"),
    4: np.dtype("<u4"),
    8: np.dtype("<u8"),
}
_KEYS = ("owners", "names", "first", "widths", "lengths", "copy_of")


@dataclass(slots=True)  # not frozen: a master makes ~30 a report, frozen ones cost 2x
class BucketSpan:
    """One histogram's buckets from its first nonzero one (``first``) to its last."""

    first: int
    counts: np.ndarray  # unsigned (the narrowest that holds them), its first and last > 0
    total_count: int
    min_value: int  # as ``HdrHistogram.decode`` sets them: its first bucket's lowest value
    max_value: int  # and its last bucket's highest

    def add_to(self, histogram: HdrHistogram) -> None:
        """Exact merge into a histogram of our layout (``histograms.add_into``'s rule).
        Added in place (``x[a:b] += y`` would copy the sum back too: ~2 us more a span),
        and a one-bucket span (half of a delta's) as a Python int."""
        view = counts_view(histogram)
        if self.counts.size == 1:
            view[self.first] += self.total_count
        else:
            span = view[self.first : self.first + self.counts.size]
            span += self.counts
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


def pack_spans(
    histograms: Iterable[tuple[int, str, HdrHistogram]], cooperative: bool = False
) -> dict[str, Any]:
    """Non-empty histograms, each named by its owner (an index the reader knows: a metric
    group) and its name, as one block (msgpack-safe: lists and bytes). The spans' bytes
    are laid out by width (stably), so that the reader takes each width's as one array.
    ``cooperative``: yield before each histogram and each span's compression (~50 us
    each), for a worker whose users stream meanwhile."""
    packed: list[_Packed] = []
    for owner, name, histogram in histograms:
        if cooperative:
            let_streams_run()
        if not histogram.total_count:
            continue
        if histogram.counts_len != counts_length():
            raise ValueError(f"histogram {name!r} is not of this tool's layout")
        view = counts_view(histogram)
        occupied = view != 0  # its ends by argmax: a third of flatnonzero's time
        first = int(occupied.argmax())
        span = view[first : view.size - int(occupied[::-1].argmax())]
        largest = int(span.max())
        width = next(w for w, dtype in _WIDTHS.items() if largest <= np.iinfo(dtype).max)
        packed.append(_Packed(owner, name, first, width, span))
    copy_of = _twins(packed)
    own = [item for item, twin in zip(packed, copy_of, strict=True) if twin < 0]
    compressor = zlib.compressobj(COMPRESSION_LEVEL)
    data = []
    for item in sorted(own, key=lambda item: item.width):  # stable: as listed, per width
        if cooperative:
            let_streams_run()
        data.append(compressor.compress(item.span.astype(_WIDTHS[item.width]).tobytes()))
    data.append(compressor.flush())
    return {
        "owners": [item.owner for item in packed],
        "names": [item.name for item in packed],
        "first": [item.first for item in packed],
        "widths": [item.width for item in packed],
        "lengths": [item.span.size for item in packed],
        "copy_of": copy_of,
        "data": b"".join(data),
    }


def _twins(packed: list[_Packed]) -> list[int]:
    """Each span's earlier twin (its index), or -1: where each event carries one token ITL
    and TPOT are one histogram, and where no cause is known a metric's unexplained part
    (``@none``) is all of it; a twin's buckets travel once (a busy delta's: 38 -> 12 kB)."""
    seen: dict[tuple[int, int], list[int]] = {}
    copy_of = []
    for index, item in enumerate(packed):
        twins = seen.setdefault((item.first, item.span.size), [])
        twin = next((t for t in twins if np.array_equal(packed[t].span, item.span)), -1)
        if twin < 0:
            twins.append(index)
        copy_of.append(twin)
    return copy_of


class _Lists(NamedTuple):
    """A block's lists, one entry a histogram."""

    owners: list[int]
    names: list[str]
    firsts: list[int]
    widths: list[int]
    lengths: list[int]
    copy_of: list[int]  # -1, or the index of an earlier span with the same buckets


def unpack_spans(block: Any, owners: int) -> list[tuple[int, str, BucketSpan]]:
    """A block read back (``owners``: how many the reader knows), every part checked;
    ``HistogramDecodeError`` says what is wrong."""
    if not isinstance(block, dict):
        raise HistogramDecodeError("histograms: not a block of histograms")
    lists = _checked_lists(block, owners)
    data = block.get("data")
    if not isinstance(data, bytes):
        raise HistogramDecodeError("histograms: no data")
    widths, lengths, copy_of = lists.widths, lists.lengths, lists.copy_of
    raw = _inflate_exactly(data, _own_bytes(lists))
    spans: list[Any] = [None] * len(widths)
    offset = 0
    for width in sorted(set(widths)):  # each width's own spans lie together, in order
        chosen = [
            index
            for index, (each, twin) in enumerate(zip(widths, copy_of, strict=True))
            if each == width and twin < 0
        ]
        sizes = [lengths[index] for index in chosen]
        counts = np.frombuffer(raw, _WIDTHS[width], sum(sizes), offset)
        offset += counts.nbytes
        read = _read_spans([lists.firsts[index] for index in chosen], sizes, counts)
        for index, span in zip(chosen, read, strict=True):
            spans[index] = span
    for index, twin in enumerate(copy_of):
        if twin >= 0:
            spans[index] = spans[twin]  # the same buckets, added to each (never changed)
    return list(zip(lists.owners, lists.names, spans, strict=True))


def _own_bytes(lists: _Lists) -> int:
    """The block's data: the spans that are not a twin's, at their widths."""
    return sum(
        width * length
        for width, length, twin in zip(lists.widths, lists.lengths, lists.copy_of, strict=True)
        if twin < 0
    )


def _read_spans(firsts: list[int], sizes: list[int], counts: np.ndarray) -> list[BucketSpan]:
    """Spans of one width laid end to end in ``counts`` (a view of the inflated bytes, not
    copied: a fresh 150 kB array per report faulted its pages in): trimmed, counts and
    totals bounded."""
    lengths = np.array(sizes)
    ends = np.cumsum(lengths)
    starts = ends - lengths
    if not (counts[starts].all() and counts[ends - 1].all()):
        raise HistogramDecodeError("histograms: a span that is not trimmed")
    if counts.itemsize == 8 and int(counts.max()) > MAX_BUCKET_COUNT:
        raise HistogramDecodeError("histograms: a count beyond any run's")
    totals = np.add.reduceat(counts, starts, dtype=np.uint64).tolist()  # < 2**63 each
    if max(totals) > MAX_BUCKET_COUNT:
        raise HistogramDecodeError("histograms: a total beyond any run's")
    lasts = [first + size - 1 for first, size in zip(firsts, sizes, strict=True)]
    lowest, highest = bucket_bounds(firsts, lasts)
    return [
        BucketSpan(first, counts[start:end], total, low, high)
        for first, start, end, total, low, high in zip(
            firsts, starts.tolist(), ends.tolist(), totals, lowest, highest, strict=True
        )
    ]


def _checked_lists(block: dict[str, Any], owners: int) -> _Lists:
    """The block's lists: as long as each other and bounded, ints where numbers belong,
    each histogram named once, each span inside our layout. Checked in plain Python: for
    a delta's ~20 histograms, a dozen numpy passes over short arrays cost 3x as much."""
    parts: list[Any] = [block.get(key) for key in _KEYS]  # checked next
    if not all(isinstance(part, list) for part in parts) or len(parts[0]) > MAX_HISTOGRAMS:
        raise HistogramDecodeError(f"histograms: not lists of at most {MAX_HISTOGRAMS}")
    if len({len(part) for part in parts}) != 1:
        raise HistogramDecodeError("histograms: lists of different lengths")
    lists = _Lists(*parts)
    if not lists.names:
        return lists
    numbers = chain(lists.owners, lists.firsts, lists.widths, lists.lengths, lists.copy_of)
    # ints only (a bool, a float, a text or a list is none); one past int64 fails a range
    if not (
        set(map(type, numbers)) == {int}
        and min(lists.owners) >= 0
        and max(lists.owners) < owners
        and set(lists.widths) <= _WIDTHS.keys()
    ):
        raise HistogramDecodeError("histograms: a span that is not one")
    if not (
        min(lists.firsts) >= 0
        and min(lists.lengths) > 0
        and max(map(operator.add, lists.firsts, lists.lengths)) <= counts_length()
    ):
        raise HistogramDecodeError("histograms: a span outside this tool's layout")
    if not (
        set(map(type, lists.names)) == {str}
        and min(map(len, lists.names)) > 0
        and max(map(len, lists.names)) <= MAX_NAME_CHARS
    ):
        raise HistogramDecodeError("histograms: a name that is not a short text")
    if len(set(zip(lists.owners, lists.names, strict=True))) != len(lists.names):
        raise HistogramDecodeError("histograms: a histogram twice")
    if not all(
        twin == -1 or _is_twin(lists, index, twin) for index, twin in enumerate(lists.copy_of)
    ):
        raise HistogramDecodeError("histograms: a copy of a span that is not its twin")
    size = _own_bytes(lists)
    if size > MAX_BLOCK_BYTES:
        raise HistogramDecodeError(
            f"histograms: {size:,} bytes of counts, more than any delta of this tool"
        )
    return lists


def _is_twin(lists: _Lists, index: int, twin: int) -> bool:
    """An earlier span with data of its own, of the same place, width and length."""
    return (
        0 <= twin < index
        and lists.copy_of[twin] == -1
        and lists.firsts[twin] == lists.firsts[index]
        and lists.widths[twin] == lists.widths[index]
        and lists.lengths[twin] == lists.lengths[index]
    )


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
