"""What a master keeps of each worker for its per-worker view: the worker's own read
delays, loop health and per-cause ITL/TPOT, in the memory of the buckets they span.

As ``HdrHistogram``s they took 184 KiB each, six or more a worker: a master of 1,000
workers held over a GB for them alone. A ``GrowingSpan`` holds only the buckets from the
lowest to the highest a worker has had (~20 kB for a busy worker's ITL) and is made an
``HdrHistogram`` only when the summary reads it, one at a time.
"""

from __future__ import annotations

import sys
from functools import lru_cache

import numpy as np
from hdrh.histogram import HdrHistogram

from tpot_locust.common.metric_catalogue import READ_DELAY
from tpot_locust.metrics.histogram_names import CAUSE_METRICS
from tpot_locust.metrics.histograms import counts_view, new_histogram
from tpot_locust.metrics.metric_set import ClassMetrics
from tpot_locust.metrics.span_counts import BucketSpan
from tpot_locust.metrics.stalls import CLIENT_SCALARS, ClientHealth
from tpot_locust.metrics.wire_delta import WireDelta

_NARROW_MAX = 2**32 - 1


class GrowingSpan:
    """A histogram's counts from its lowest nonzero bucket to its highest; adds exactly as
    ``BucketSpan.add_to`` into a whole histogram does."""

    def __init__(self) -> None:
        self.first = 0
        # 4 bytes a bucket while no bucket can pass 2**32 (all its samples fewer), then 8
        self.counts = np.zeros(0, dtype=np.uint32)
        self._wide = False
        self.total_count = 0
        self.min_value = sys.maxsize  # as an empty ``HdrHistogram``'s
        self.max_value = 0

    def add(self, span: BucketSpan) -> None:
        low, high = span.first, span.first + span.counts.size
        if self.total_count + span.total_count > _NARROW_MAX and not self._wide:
            self.counts, self._wide = (
                self.counts.astype(np.uint64),
                True,
            )  # a bucket could pass 2**32 now
        if not self.counts.size:
            self.first, self.counts = low, span.counts.astype(self.counts.dtype)
        else:
            first, last = self.first, self.first + self.counts.size
            if low < first or high > last:  # rare once a worker's range is known
                grown = np.zeros(max(high, last) - min(low, first), dtype=self.counts.dtype)
                grown[first - min(low, first) : last - min(low, first)] = self.counts
                self.first, self.counts = min(low, first), grown
            self.counts[low - self.first : high - self.first] += span.counts
        self.total_count += span.total_count
        self.min_value = min(self.min_value, span.min_value)
        self.max_value = max(self.max_value, span.max_value)

    def to_histogram(self) -> HdrHistogram:
        histogram = new_histogram()
        counts_view(histogram)[self.first : self.first + self.counts.size] = self.counts
        histogram.total_count = self.total_count
        histogram.min_value, histogram.max_value = self.min_value, self.max_value
        return histogram


@lru_cache(maxsize=1024)
def _is_cause_part(name: str) -> bool:
    """ITL or TPOT, or one's part (``itl@prefill``): a worker's attribution reads them."""
    return name.split("@", 1)[0] in CAUSE_METRICS


class WorkerFigures:
    """One worker's own figures, from every delta of it the master merged."""

    def __init__(self) -> None:
        self.read_delay = GrowingSpan()
        self.loop_lag = GrowingSpan()
        self.scalars = dict.fromkeys(CLIENT_SCALARS, 0)  # ``ClientHealth``'s counts
        self.causes: dict[str, GrowingSpan] = {}  # ITL, TPOT and their parts, all classes

    def add(self, delta: WireDelta) -> None:
        for wire in delta.groups.values():
            for name, span in wire.histograms.items():
                if _is_cause_part(name):
                    self.causes.setdefault(name, GrowingSpan()).add(span)
            if (read_delay := wire.histograms.get(READ_DELAY.name)) is not None:
                self.read_delay.add(read_delay)
        if delta.client.loop_lag is not None:
            self.loop_lag.add(delta.client.loop_lag)
        for name in CLIENT_SCALARS:
            self.scalars[name] += delta.client.scalars[name]

    def health(self) -> ClientHealth:
        """Its loop health as one ``ClientHealth`` (without its worst stalls: those are in
        the run's, named by worker)."""
        health = ClientHealth(loop_lag=self.loop_lag.to_histogram())
        health.add_scalars(self.scalars, [])
        return health

    def cause_metrics(self) -> ClassMetrics:
        return ClassMetrics(
            histograms={name: span.to_histogram() for name, span in self.causes.items()}
        )
