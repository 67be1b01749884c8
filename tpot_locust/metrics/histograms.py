"""HDR histograms in integer microseconds, recorded in bulk with numpy.

``hdrhistogram``'s ``record_value`` is pure Python (~2 us a call), too slow for one call per
token. Values are buffered as integers and bucketed with numpy straight into the
histogram's counts array, using the same index arithmetic as the library, so an encoded
histogram is identical to one built value by value. Statistics read the counts array with
numpy too: the library's iterators take ~1 ms per percentile and ~170 ms for a mean.
"""

from __future__ import annotations

import base64
import binascii
import ctypes
import math
import weakref
import zlib
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from hdrh.codec import (
    V2_COMPRESSION_COOKIE_BASE,
    V2_ENCODING_COOKIE_BASE,
    V2_MAX_WORD_SIZE_IN_BYTES,
    ExternalHeader,
    PayloadHeader,
    get_cookie_base,
)
from hdrh.histogram import HdrHistogram

from tpot_locust.common.percentiles import PERCENTILES

LOWEST_US = 1
HIGHEST_US = 3_600_000_000  # one hour
SIGNIFICANT_DIGITS = 3

SMALL_BATCH = 4096


def warm_up() -> None:
    """Build the value tables now (~50 ms), not in the middle of a run's event loop."""
    _layout()


def _without_cycle(histogram: HdrHistogram) -> HdrHistogram:
    """Break hdrhistogram's histogram <-> encoder reference cycle.

    With the cycle, every dropped histogram (and its 184 KiB counts array) waited for
    Python's cycle collector: a worker's RSS grew 23 MB over 1e7 recorded gaps and a master
    merging deltas peaked at 128 MB (benchmarks/memory.py); without it both stay flat.
    """
    histogram.encoder.histogram = weakref.proxy(histogram)
    return histogram


def new_histogram() -> HdrHistogram:
    return _without_cycle(HdrHistogram(LOWEST_US, HIGHEST_US, SIGNIFICANT_DIGITS))


class HistogramDecodeError(ValueError):
    """An encoded histogram this tool cannot have written: malformed, or bigger than ours."""


# A count no run reaches (2**48 samples in one bucket): their sums stay far inside int64.
MAX_BUCKET_COUNT = 1 << 48
_EXTERNAL_HEADER = ctypes.sizeof(ExternalHeader)
_PAYLOAD_HEADER = ctypes.sizeof(PayloadHeader)
_MAX_WORD_BYTES: int = V2_MAX_WORD_SIZE_IN_BYTES  # hdrh's (untyped) constant


def _max_payload_bytes() -> int:
    """The largest inflated payload our configuration can need: header, and each count as
    a 9-byte LEB128 word (the library's worst case)."""
    return _PAYLOAD_HEADER + _layout().counts_len * _MAX_WORD_BYTES


def _max_encoded_chars() -> int:
    """Base64 of the worst case compressed (zlib adds < 0.1 % and a few bytes)."""
    return 4 * (_EXTERNAL_HEADER + _max_payload_bytes() * 2 + 1024) // 3 + 4


def _counts_len(lowest: int, highest: int, digits: int) -> int:
    """``HdrHistogram``'s counts-array length for a configuration, without allocating it."""
    unit_magnitude = int(math.floor(math.log2(lowest)))
    sub_bucket_count: int = 2 ** int(math.ceil(math.log2(2 * 10**digits)))
    smallest_untrackable = sub_bucket_count << unit_magnitude
    buckets = 1
    while smallest_untrackable <= highest:  # at most 64 rounds: highest is 64-bit
        smallest_untrackable <<= 1
        buckets += 1
    return (buckets + 1) * (sub_bucket_count // 2)


def _inflate(compressed: bytes) -> bytes:
    """zlib with a cap: a payload that inflates past what our histograms can need is refused
    after at most that many bytes, never inflated whole (a zlib bomb)."""
    limit = _max_payload_bytes()
    inflater = zlib.decompressobj()
    try:
        data = inflater.decompress(compressed, limit + 1)
    except zlib.error as error:
        raise HistogramDecodeError(f"not a valid histogram (zlib: {error})") from None
    if len(data) > limit or inflater.unconsumed_tail:
        raise HistogramDecodeError(
            f"the histogram inflates past {limit:,} bytes, more than any histogram of this "
            "tool needs (1 us .. 1 h, 3 digits): refused"
        )
    if not inflater.eof:
        raise HistogramDecodeError("not a valid histogram (its zlib stream is truncated)")
    return data


def _check_payload(data: bytes) -> None:
    """The inflated payload's header: the V2 encoding and a configuration no larger than
    ours, so the counts array it allocates stays within our histograms' size."""
    if len(data) < _PAYLOAD_HEADER:
        raise HistogramDecodeError("not a valid histogram (payload too short)")
    header = PayloadHeader.from_buffer_copy(data)
    if get_cookie_base(header.cookie) != V2_ENCODING_COOKIE_BASE:
        raise HistogramDecodeError("not a valid histogram (unknown payload cookie)")
    if header.payload_len > len(data) - _PAYLOAD_HEADER:
        raise HistogramDecodeError("not a valid histogram (payload length past its end)")
    lowest, highest = header.lowest_trackable_value, header.highest_trackable_value
    digits = header.significant_figures
    if not (1 <= lowest and 2 * lowest <= highest and 1 <= digits <= 5):
        raise HistogramDecodeError(
            f"not a valid histogram (range {lowest} .. {highest}, {digits} digits)"
        )
    if _counts_len(lowest, highest, digits) > _layout().counts_len:
        raise HistogramDecodeError(
            f"a histogram of {lowest} .. {highest} us at {digits} digits is larger than this "
            "tool's (1 us .. 1 h, 3 digits): refused"
        )


def _checked_blob(encoded: str | bytes) -> None:
    """Everything about an encoded histogram that must hold before the library decodes it."""
    if not isinstance(encoded, str | bytes):
        raise HistogramDecodeError(f"a histogram is a base64 string, not {type(encoded).__name__}")
    if len(encoded) > _max_encoded_chars():
        raise HistogramDecodeError(
            f"{len(encoded):,} characters: larger than any histogram of this tool"
        )
    try:
        raw = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        raise HistogramDecodeError("not a valid histogram (bad base64)") from None
    if len(raw) < _EXTERNAL_HEADER:
        raise HistogramDecodeError("not a valid histogram (too short)")
    header = ExternalHeader.from_buffer_copy(raw)
    if get_cookie_base(header.cookie) != V2_COMPRESSION_COOKIE_BASE:
        raise HistogramDecodeError("not a valid histogram (unknown cookie)")
    if header.length != len(raw) - _EXTERNAL_HEADER:
        raise HistogramDecodeError("not a valid histogram (its length does not match)")
    _check_payload(_inflate(raw[_EXTERNAL_HEADER:]))


def decode_histogram(encoded: str | bytes) -> HdrHistogram:
    """A histogram from its base64 V2 blob, checked first (size, headers, inflated size), so
    a hostile or damaged blob is a ``HistogramDecodeError``, never gigabytes or a crash."""
    _checked_blob(encoded)
    try:
        histogram = _without_cycle(HdrHistogram.decode(encoded))
    except Exception as error:  # the library's own checks: its exceptions vary
        raise HistogramDecodeError(f"not a valid histogram ({error})") from None
    counts = counts_view(histogram)
    if counts.size and int(counts.max()) > MAX_BUCKET_COUNT:
        raise HistogramDecodeError("not a valid histogram (a count beyond any run's)")
    # buckets each within the bound can still sum past int64: the total wrapped, and the
    # histogram read as empty (its metric's section vanished from the report)
    total = sum(int(count) for count in counts[counts > 0])
    if total > MAX_BUCKET_COUNT or total != histogram.total_count:
        raise HistogramDecodeError(
            f"not a valid histogram (a total of {total:.3g} samples, beyond any run's)"
        )
    if histogram.counts_len != _layout().counts_len:
        merged = new_histogram()
        try:
            merged.add(histogram)
        except Exception as error:
            raise HistogramDecodeError(f"a histogram this tool cannot merge ({error})") from None
        return merged
    return histogram


def counts_view(histogram: HdrHistogram) -> np.ndarray:
    """A writable numpy view of the histogram's ctypes counts array (made once: ~1 us, a
    third of adding a worker's span to it)."""
    cached = histogram.__dict__.get("_tpot_counts_view")
    if cached is not None and cached[0] is histogram.counts:
        view: np.ndarray = cached[1]
        return view
    view = np.ctypeslib.as_array(histogram.counts)
    histogram._tpot_counts_view = (histogram.counts, view)
    return view


@dataclass(frozen=True)
class _Layout:
    """Per-index value tables for our fixed histogram configuration."""

    counts_len: int
    unit_magnitude: int
    sub_bucket_half_count_magnitude: int
    sub_bucket_half_count: int
    sub_bucket_mask: int
    lowest: np.ndarray
    highest: np.ndarray
    median: np.ndarray


@lru_cache(maxsize=1)
def _layout() -> _Layout:
    template = new_histogram()
    indexes = range(template.counts_len)
    lowest = np.array([template.get_value_from_index(i) for i in indexes], dtype=np.int64)
    highest = np.array([template.get_highest_equivalent_value(v) for v in lowest], dtype=np.int64)
    return _Layout(
        counts_len=template.counts_len,
        unit_magnitude=template.unit_magnitude,
        sub_bucket_half_count_magnitude=template.sub_bucket_half_count_magnitude,
        sub_bucket_half_count=template.sub_bucket_half_count,
        sub_bucket_mask=template.sub_bucket_mask,
        lowest=lowest,
        highest=highest,
        median=lowest + (highest - lowest + 1) // 2,
    )


def counts_length() -> int:
    """Our histograms' counts-array length (23,552 buckets: 1 us .. 1 h at 3 digits)."""
    return _layout().counts_len


def bucket_bounds(first: list[int], last: list[int]) -> tuple[list[int], list[int]]:
    """The lowest value of each ``first`` bucket and the highest of each ``last``: the min
    and max ``HdrHistogram.decode`` gives a histogram whose nonzero buckets span them."""
    layout = _layout()
    lowest: list[int] = layout.lowest[first].tolist()
    highest: list[int] = layout.highest[last].tolist()
    return lowest, highest


def bucket_highest(indexes: np.ndarray) -> np.ndarray:
    """The highest value of each bucket in ``indexes``: a percentile's figure when its
    sample lies there (``histogram_stats``' rounding)."""
    highest: np.ndarray = _layout().highest[indexes]
    return highest


def counts_indexes(values: np.ndarray) -> np.ndarray:
    """Vectorised ``HdrHistogram._counts_index_for`` for non-negative int64 values."""
    layout = _layout()
    masked = values.astype(np.int64) | layout.sub_bucket_mask
    # Bit length of each value: position of the highest set bit plus one.
    bit_length = np.floor(np.log2(masked.astype(np.float64))).astype(np.int64) + 1
    # float64 log2 can be off by one near powers of two above 2**48; correct exactly.
    bit_length += (masked >> bit_length) > 0
    bit_length -= (masked >> np.maximum(bit_length - 1, 0)) == 0
    bucket = bit_length - layout.unit_magnitude - (layout.sub_bucket_half_count_magnitude + 1)
    sub_bucket = values >> (bucket + layout.unit_magnitude)
    base = (bucket + 1) << layout.sub_bucket_half_count_magnitude
    return base + (sub_bucket - layout.sub_bucket_half_count)


def record_many(histogram: HdrHistogram, values: np.ndarray) -> int:
    """Record integer microsecond values; returns how many had to be clamped into range.

    Negative values (a clock that went backwards) are clamped to 0 and values above one hour
    to the top of the range, so every sample is still counted instead of silently dropped.
    """
    if values.size == 0:
        return 0
    values = np.asarray(values, dtype=np.int64)
    clamped = int(np.count_nonzero((values < 0) | (values > HIGHEST_US)))
    if clamped:
        values = np.clip(values, 0, HIGHEST_US)
    indexes = counts_indexes(values)
    counts = counts_view(histogram)
    if values.size < SMALL_BATCH:
        np.add.at(counts, indexes, 1)  # cheaper than a full-length bincount for few values
    else:
        counts += np.bincount(indexes, minlength=counts.size).astype(counts.dtype)
    histogram.total_count += int(values.size)
    histogram.min_value = min(histogram.min_value, int(values.min()))
    histogram.max_value = max(histogram.max_value, int(values.max()))
    return clamped


@dataclass(frozen=True)
class HistogramStats:
    """Summary of one histogram, in the histogram's unit (microseconds)."""

    count: int
    mean: float
    min: int
    max: int
    percentiles: dict[float, int]
    above: dict[float, int]  # samples strictly above each percentile's value

    @property
    def median(self) -> int:
        return self.percentiles[50.0]


def percentile_rank(percentile: float, total: int) -> int:
    """The 1-based rank of a percentile's sample among ``total``: HdrHistogram's rule
    (``p x N`` rounded half up, at least 1). One rule for our histograms and the truth's
    exact samples, so a jump in the distribution reads alike on both sides."""
    return max(int(percentile * total / 100 + 0.5), 1)


def exact_percentile(samples: np.ndarray, percentile: float) -> float:
    """The sample at ``percentile_rank`` of ``samples`` (sorted here), exactly."""
    rank = percentile_rank(percentile, samples.size)
    return float(np.partition(samples, rank - 1)[rank - 1])


def histogram_stats(
    histogram: HdrHistogram, percentiles: tuple[float, ...] = PERCENTILES
) -> HistogramStats:
    """Percentiles with the library's rounding (highest equivalent value), read by numpy."""
    layout = _layout()
    counts = counts_view(histogram).astype(np.int64)
    total = int(counts.sum())
    if total == 0:
        zeros = dict.fromkeys(percentiles, 0)
        return HistogramStats(0, 0.0, 0, 0, zeros, dict(zeros))
    cumulative = np.cumsum(counts)
    values: dict[float, int] = {}
    above: dict[float, int] = {}
    for percentile in percentiles:
        target = percentile_rank(percentile, total)
        index = int(np.searchsorted(cumulative, target))
        values[percentile] = int(layout.highest[index])
        above[percentile] = total - int(cumulative[index])
    mean = float(np.dot(counts, layout.median)) / total
    nonzero = np.flatnonzero(counts)
    return HistogramStats(
        count=total,
        mean=mean,
        min=int(layout.lowest[nonzero[0]]),
        max=int(layout.highest[nonzero[-1]]),
        percentiles=values,
        above=above,
    )


def add_into(total: HdrHistogram, delta: HdrHistogram) -> None:
    """Exact merge: counts add, so percentiles of the sum are those of all values together.

    Both have our layout, so the counts arrays add element-wise (numpy: ~20x faster than
    ``HdrHistogram.add``, which matters on a master merging every worker every second).
    """
    if not delta.total_count:
        return
    if total.counts_len != delta.counts_len:
        total.add(delta)
        return
    counts_view(total)[:] += counts_view(delta)
    total.total_count += delta.total_count
    total.min_value = min(total.min_value, delta.min_value)
    total.max_value = max(total.max_value, delta.max_value)


def count_below(histogram: HdrHistogram, value_us: int) -> int:
    """Samples in buckets wholly below ``value_us`` (exact below 2048 us)."""
    index = int(counts_indexes(np.array([value_us], dtype=np.int64))[0])
    return int(counts_view(histogram)[:index].sum())


def count_above(histogram: HdrHistogram, value_us: int) -> int:
    """Samples in buckets above the one holding ``value_us``: how ``HistogramStats.above``
    counts, so a part's count is comparable with its whole's."""
    return int(counts_view(histogram)[_index_of(value_us) + 1 :].sum())


@lru_cache(maxsize=1024)
def _index_of(value_us: int) -> int:
    """The bucket holding ``value_us``: numpy's ~12 us for one value was most of
    ``count_above``'s time, and a tail's threshold is read against every cause's part."""
    return int(counts_indexes(np.array([value_us], dtype=np.int64))[0])


def without(histogram: HdrHistogram, part: HdrHistogram) -> HdrHistogram:
    """The samples of ``histogram`` that are not in ``part`` (a subset of it), exactly."""
    result = new_histogram()
    if not part.total_count:
        add_into(result, histogram)
        return result
    counts = counts_view(histogram).astype(np.int64) - counts_view(part).astype(np.int64)
    return histogram_of_counts(np.maximum(counts, 0))


def histogram_of_counts(counts: np.ndarray) -> HdrHistogram:
    """A histogram holding ``counts``: one count a bucket of our layout (``counts_view``)."""
    result = new_histogram()
    counts_view(result)[:] = counts
    result.total_count = int(counts.sum())
    if result.total_count:
        nonzero = np.flatnonzero(counts)
        layout = _layout()
        result.min_value = int(layout.lowest[nonzero[0]])
        result.max_value = int(layout.highest[nonzero[-1]])
    return result
