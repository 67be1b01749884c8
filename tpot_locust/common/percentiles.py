"""The percentiles every figure is reported at, and the keys they go by: one home.

Why: the keys ("p50" ... "p99.99") were spelt in a dozen tuples across the layers and each
report module had its own ``_key``; a percentile added or renamed here now reaches the
summary, the reports, the gate and the web UI alike (issue 47). The keys are spelt out as a
``Literal`` too, so that a summary's figures indexed by one type-check (``MetricFigures``).
"""

from __future__ import annotations

from typing import Literal, TypeGuard, get_args

PERCENTILES: tuple[float, ...] = (50.0, 90.0, 99.0, 99.9, 99.99)  # the seed's, and P90
PercentileKey = Literal["p50", "p90", "p99", "p99.9", "p99.99"]  # PERCENTILES' (checked)
Statistic = Literal["mean", "p50", "p90", "p99", "p99.9", "p99.99", "max"]


def percentile_key(percentile: float) -> str:
    """A percentile's key in summaries and files: 99.9 -> "p99.9"."""
    return f"p{percentile:g}"


PERCENTILE_KEYS: tuple[PercentileKey, ...] = get_args(PercentileKey)
if PERCENTILE_KEYS != tuple(percentile_key(p) for p in PERCENTILES):
    raise AssertionError(f"PercentileKey {PERCENTILE_KEYS} does not spell {PERCENTILES}")


def key_of(percentile: float) -> PercentileKey:
    """The key of one of ``PERCENTILES``, typed: 99.9 -> "p99.9"."""
    return PERCENTILE_KEYS[PERCENTILES.index(percentile)]


TAIL_PERCENTILES = (99.0, 99.9, 99.99)  # the tail "Why the tail" explains
TAIL_KEYS = tuple(key_of(p) for p in TAIL_PERCENTILES)
UP_TO_P99_9 = PERCENTILE_KEYS[:-1]  # where a phase or an interval has too few samples for P99.99
STATISTICS: tuple[Statistic, ...] = ("mean", *PERCENTILE_KEYS, "max")  # a table's, an SLO's
if STATISTICS != get_args(Statistic):
    raise AssertionError(f"Statistic {get_args(Statistic)} does not spell {STATISTICS}")


def is_statistic(text: object) -> TypeGuard[Statistic]:
    """Whether ``text`` (a user's, a saved file's) is one of ``STATISTICS``: a figure's
    key, narrowed for the type check."""
    return text in STATISTICS
