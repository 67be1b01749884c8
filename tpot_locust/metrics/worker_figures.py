"""A worker's own figures of a test, kept by the worker itself: its read delays, loop
health and per-cause ITL/TPOT, every class merged, from every delta it sent.

The master's per-worker view (``report.worker_rows``) is made from them on the worker and
sent as a few hundred bytes, so a master of 1,000 workers keeps a row each rather than
their buckets (~90 kB a busy worker when it kept them). The master's view was built from
the same deltas: the figures are the same, exactly. The worker holds them as whole
histograms (184 KiB each, ~30 with every cause: ~5 MB), one set per process.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache

from tpot_locust.common.metric_catalogue import READ_DELAY
from tpot_locust.metrics.histogram_names import CAUSE_METRICS
from tpot_locust.metrics.histograms import add_into, new_histogram
from tpot_locust.metrics.metric_set import ClassMetrics, MetricSet
from tpot_locust.metrics.stalls import ClientHealth


@lru_cache(maxsize=1024)
def _is_cause_part(name: str) -> bool:
    """ITL or TPOT, or one's part (``itl@prefill``): a worker's attribution reads them."""
    return name.split("@", 1)[0] in CAUSE_METRICS


class WorkerFigures:
    """One worker's own figures, from every delta it sent this test (all classes)."""

    def __init__(self) -> None:
        self.read_delay = new_histogram()
        self.health = ClientHealth()  # its worst stalls too, though its row reads none
        self.causes = ClassMetrics()  # ITL, TPOT and their parts

    def add(self, delta: MetricSet, pause: Callable[[], None] | None = None) -> None:
        """``pause``: called after each histogram added (~25 us each; a worker whose users
        stream meanwhile passes ``WorkSlices.after_item``). A histogram a delta holds
        empty is not added (a delta on the wire leaves it out, and a part's presence is
        read: ``worker_shares``)."""
        for metrics in delta.groups.values():
            for name, histogram in metrics.histograms.items():
                if not histogram.total_count:
                    continue
                if _is_cause_part(name):
                    into = self.causes.merged_into(name)
                elif name == READ_DELAY.name:
                    into = self.read_delay
                else:
                    continue
                add_into(into, histogram)
                if pause is not None:
                    pause()
        self.health.add(delta.client)
