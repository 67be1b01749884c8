"""How sure is a percentile of one run: a 95 % confidence interval from its time sections.

Token gaps are not independent samples: a prefill burst or an engine pause stretches every
stream's gap at once, so a 20,000-gap run may hold only a handful of independent tail
events, and an interval that counts gaps (the binomial order statistic) is far too narrow.
Time is what separates independent events, so the run's window is cut into ``k`` contiguous
sections of whole report intervals (the per-interval histograms, merged exactly across
workers), the percentile is read in each, and their spread says how far the run's own
figure may be from the server's (sectioning, or batch means: Asmussen and Glynn, *Stochastic
Simulation*, IV.5): the interval is the whole run's figure +/- t(k-1, 0.975) x s / sqrt(k),
``s`` the sections' standard deviation. It holds where the sections are about independent
(each longer than the run's correlated episodes: a burst, a pause) and a section's
estimate varies about normally; benchmarks/README.md, "intervals", measures its coverage.

Where fewer than half the sections hold a sample above the whole run's figure
(``MIN_SECTIONS_ABOVE``), the tail came in too few episodes for its sections to say how it
varies: the percentile is **not measured** (no interval), with about how much longer the run
would have had to be. On bursty runs, P99.9 sat on 3 bursts of 11 s: there sectioning gave
half-widths of 29-62 %, and this rule says "not measured" in all 20 runs
(benchmarks/README.md, "intervals").
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np
from hdrh.histogram import HdrHistogram

from tpot_locust.metrics.histograms import (
    add_into,
    bucket_highest,
    counts_indexes,
    counts_view,
    new_histogram,
    percentile_rank,
)

# k, where the run has that many report intervals: a 12 s run's 1 s intervals each a section
# (as measured: benchmarks/README.md, "intervals"); a longer run's sections longer, so that
# each stays longer than the correlated episodes (bursts, pauses) it may hold
SECTIONS = 12
MIN_SECTIONS = 5  # fewer: no interval (t's 0.975 quantile with 4 degrees of freedom is 2.78)
# The share of sections that must hold a sample above the whole run's figure: fewer, and
# the tail's samples came in too few episodes (bursts, pauses) for an interval
MIN_SECTIONS_ABOVE = 0.5
# t(k - 1, 0.975), k = 2 .. 30 (scipy.stats.t.ppf); over 30, the normal's 1.96
_T_975 = {
    1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306,
    9: 2.262, 10: 2.228, 11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131, 16: 2.120,
    17: 2.110, 18: 2.101, 19: 2.093, 20: 2.086, 21: 2.080, 22: 2.074, 23: 2.069, 24: 2.064,
    25: 2.060, 26: 2.056, 27: 2.052, 28: 2.048, 29: 2.045,
}  # fmt: skip


def t_975(degrees: int) -> float:
    """Student's t 0.975 quantile (a two-sided 95 % interval)."""
    return _T_975.get(degrees) or t_quantile(0.975, degrees)


def t_quantile(probability: float, degrees: int) -> float:
    """Student's t quantile, by its Cornish-Fisher expansion about the normal's (Abramowitz
    and Stegun 26.7.5): within 0.1 % of the table at 0.975 from 3 degrees of freedom, a
    little low far in the tail with few (a family-wide bound at 5 % / 40, 4 degrees: ~8)."""
    z = NormalDist().inv_cdf(probability)
    terms = (
        (z**3 + z) / 4,
        (5 * z**5 + 16 * z**3 + 3 * z) / 96,
        (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384,
        (79 * z**9 + 776 * z**7 + 1482 * z**5 - 1920 * z**3 - 945 * z) / 92160,
    )
    expansion: float = sum(term / degrees ** (power + 1) for power, term in enumerate(terms))
    return z + expansion


@dataclass(frozen=True)
class PercentileInterval:
    """One percentile's 95 % interval (ms), or why there is none (``low_ms`` None)."""

    low_ms: float | None
    high_ms: float | None
    sections: int
    why_not: str | None = None
    longer_s: float | None = None  # not measured: about how much longer the run needs

    @property
    def measured(self) -> bool:
        return self.low_ms is not None


def sections_of(slices: list[HdrHistogram], sections: int = SECTIONS) -> list[HdrHistogram]:
    """``slices`` (one histogram a report interval, in time order) merged into ``sections``
    contiguous sections of as equal a number of slices as they divide into."""
    count = min(sections, len(slices))
    if count == len(slices):
        return list(slices)  # each already a section (read, never written)
    merged = []
    for part in np.array_split(np.arange(len(slices)), count) if count else []:
        histogram = new_histogram()
        for index in part:
            add_into(histogram, slices[int(index)])
        merged.append(histogram)
    return merged


def percentile_interval(
    slices: list[HdrHistogram], percentile: float, whole_us: float, window_s: float
) -> PercentileInterval:
    """The 95 % interval of ``percentile`` around the whole run's figure ``whole_us``, from
    the run's per-interval histograms ``slices`` (its window, ``window_s`` long)."""
    return percentile_intervals(slices, {percentile: whole_us}, window_s)[percentile]


def percentile_intervals(
    slices: list[HdrHistogram], figures_us: Mapping[float, float], window_s: float
) -> dict[float, PercentileInterval]:
    """``percentile_interval`` of each percentile in ``figures_us`` (percentile: the whole
    run's figure), the slices put in sections and read once."""
    parts = [counts_view(part) for part in sections_of(slices) if part.total_count]
    counts = np.array(parts, dtype=np.int64) if parts else np.zeros((0, 1), dtype=np.int64)
    return section_intervals(counts, figures_us, window_s)


def section_intervals(
    counts: np.ndarray, figures_us: Mapping[float, float], window_s: float
) -> dict[float, PercentileInterval]:
    """Each percentile's interval from its sections' bucket counts (``counts``: one row a
    section, our histograms' layout), read together: the live tab's way
    (``metrics.live_sections``) and a finished run's."""
    counts = counts[counts.sum(axis=1) > 0]
    sections = len(counts)
    if sections < MIN_SECTIONS:
        why = f"fewer than {MIN_SECTIONS} report intervals"
        return {p: _not_measured(sections, why, None) for p in figures_us}
    cumulative = np.cumsum(counts, axis=1)
    totals = cumulative[:, -1]
    found = {}
    for percentile, whole_us in figures_us.items():
        ranks = [percentile_rank(percentile, int(total)) for total in totals]
        at = [int(np.searchsorted(row, rank)) for row, rank in zip(cumulative, ranks, strict=True)]
        values = bucket_highest(np.array(at, dtype=np.int64)).astype(np.float64)
        bucket = int(counts_indexes(np.array([int(whole_us)], dtype=np.int64))[0])
        holding = int(np.count_nonzero(totals - cumulative[:, bucket] > 0))  # above its bucket
        found[percentile] = _interval(sections, holding, values, whole_us, window_s)
    return found


def _interval(
    sections: int, holding: int, values_us: np.ndarray, whole_us: float, window_s: float
) -> PercentileInterval:
    """One percentile's interval from its value in each section (``values_us``), where
    ``holding`` sections hold a sample above the whole run's figure."""
    needed = math.ceil(MIN_SECTIONS_ABOVE * sections)
    if holding < needed:
        # the tail's episodes come about as often in a longer run: ``needed`` of them
        longer = window_s * (needed / max(holding, 1) - 1) if window_s > 0 else None
        why = f"samples above it in {holding} of {sections} sections (needs {needed})"
        return _not_measured(sections, why, longer)
    spread = float(np.std(values_us, ddof=1)) if sections > 1 else 0.0
    half = t_975(sections - 1) * spread / math.sqrt(sections)
    low = max(whole_us - half, 0.0)
    return PercentileInterval(round(low / 1000, 4), round((whole_us + half) / 1000, 4), sections)


def _not_measured(sections: int, why: str, longer_s: float | None) -> PercentileInterval:
    return PercentileInterval(None, None, sections, why, longer_s)


__all__ = [
    "MIN_SECTIONS_ABOVE",
    "MIN_SECTIONS",
    "SECTIONS",
    "PercentileInterval",
    "percentile_interval",
    "percentile_intervals",
    "section_intervals",
    "sections_of",
    "t_975",
    "t_quantile",
]
