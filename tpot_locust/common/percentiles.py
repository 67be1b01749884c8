"""The percentiles every figure is reported at, and the keys they go by: one home.

Why: the keys ("p50" ... "p99.99") were spelt in a dozen tuples across the layers and each
report module had its own ``_key``; a percentile added or renamed here now reaches the
summary, the reports, the gate and the web UI alike (issue 47).
"""

from __future__ import annotations

PERCENTILES: tuple[float, ...] = (50.0, 90.0, 99.0, 99.9, 99.99)  # the seed's, and P90


def percentile_key(percentile: float) -> str:
    """A percentile's key in summaries and files: 99.9 -> "p99.9"."""
    return f"p{percentile:g}"


PERCENTILE_KEYS = tuple(
    percentile_key(p) for p in PERCENTILES
)  # "p50", "p90", "p99", "p99.9", "p99.99"
TAIL_PERCENTILES = (99.0, 99.9, 99.99)  # the tail "Why the tail" explains
TAIL_KEYS = tuple(percentile_key(p) for p in TAIL_PERCENTILES)
UP_TO_P99_9 = PERCENTILE_KEYS[:-1]  # where a phase or an interval has too few samples for P99.99
STATISTICS = ("mean", *PERCENTILE_KEYS, "max")  # a metric's figures in a table or an SLO
