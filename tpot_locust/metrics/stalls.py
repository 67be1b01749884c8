"""Client stall detector: when this process's event loop could not run, and for how long.

Kernel receive stamps keep a token's time true when our read of it comes late, but not
when several events wait in one socket: one read returns them all, with the newest one's
stamp, and a single long gap swallows the others. Read delay tops out near one token gap,
so a short, rare stall (a stop, a GC pass, a burst prompt built on the loop) never moves
its P99 while it rewrites the P99.99. So every recording process runs a *lag probe*
(``harness.watch.loop_probe``: a repeating timer on gevent's loop whose lateness is the time the
loop could not run, ``loop_lag``). A tick later than the threshold closes a *stall
window* from the previous tick (the last moment the loop was seen running) to this one;
the recorder tags every token gap that overlaps a window of its own process
``client_stall`` and the report keeps those samples apart.
"""

from __future__ import annotations

import uuid
from array import array
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from hdrh.histogram import HdrHistogram

from tpot_locust.common.timings import to_us
from tpot_locust.metrics.causes import CLIENT_STALL  # the tag, and the set-aside histograms
from tpot_locust.metrics.histograms import (
    HistogramDecodeError,
    add_into,
    decode_histogram,
    new_histogram,
    record_many,
)

STALLS_KEY = "client_stalls"  # a worker audit's stall windows (common.results_folder)
# Starts every request id this process sends, so that a request can be matched with the
# stall windows of the process that measured it (as the truth check does).
PROCESS_TAG = uuid.uuid4().hex[:4]
WORST_STALLS_KEPT = 10
# ``ClientHealth``'s counts that add (all but the lag histogram and the worst stalls)
CLIENT_SCALARS = ("stalls", "stalled_ns", "watched_ns", "gc_stalls", "gc_stalled_ns", "cpu_ns")
# Held in stalls more than this share of the time, a loop is saturated (``client.busy``).
# Measured here: a loop held 6 ms in every 10 (an overloaded worker) 0.65-0.69; a quiet
# quickstart 0.004; 64 streams x 2 ms 0.08 (0.24 in 40 ms batches, each batch over 2 ms
# a stall), 128 streams 0.45 (read at once it was busy by its read delay too), 256 0.8-0.87.
LOOP_SATURATED_SHARE = 0.5


def loop_saturated(held_share: float | None) -> bool:
    """The one rule for a run, a worker or an interval: held over ``LOOP_SATURATED_SHARE``
    (None: no probe watched)."""
    return held_share is not None and held_share > LOOP_SATURATED_SHARE


class StallWindows:
    """This process's stall windows (wall ns), in time order; they never overlap."""

    def __init__(self) -> None:
        self.starts: list[int] = []
        self.ends: list[int] = []
        self._arrays: tuple[np.ndarray, np.ndarray] | None = None

    def __len__(self) -> int:
        return len(self.starts)

    def add(self, start_wall_ns: int, end_wall_ns: int) -> None:
        self.starts.append(start_wall_ns)
        self.ends.append(end_wall_ns)
        self._arrays = None

    def clear(self) -> None:
        self.starts, self.ends, self._arrays = [], [], None

    def to_record(self, threshold_ms: float) -> dict[str, Any]:
        """What a run saves of this process's windows (wall ns), to line them up with a
        server's own logs and with the requests this process sent."""
        windows = [[start, end] for start, end in zip(self.starts, self.ends, strict=True)]
        return {"request_id_prefix": PROCESS_TAG, "threshold_ms": threshold_ms, "windows": windows}

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> StallWindows:
        windows = cls()
        for start, end in record["windows"]:
            windows.add(start, end)
        return windows

    def overlaps(self, gap_starts: np.ndarray, gap_ends: np.ndarray) -> np.ndarray:
        """Boolean mask: which gaps (start, end) overlap any window (wall ns arrays)."""
        if not self.starts or gap_starts.size == 0:
            return np.zeros(gap_starts.shape, dtype=bool)
        if self._arrays is None:
            self._arrays = (np.array(self.starts, np.int64), np.array(self.ends, np.int64))
        starts, ends = self._arrays
        # the first window ending after each gap starts is the only one that can overlap it
        first = np.searchsorted(ends, gap_starts, side="right")
        found = first < starts.size
        mask = np.zeros(gap_starts.shape, dtype=bool)
        mask[found] = starts[first[found]] < gap_ends[found]
        return mask


@dataclass
class ClientHealth:
    """One process's (or, merged, every process's) loop lag and stall windows of a period."""

    loop_lag: HdrHistogram = field(default_factory=new_histogram)  # microseconds
    stalls: int = 0
    stalled_ns: int = 0
    watched_ns: int = 0  # the time the probe watched the loop: what ``held_share`` divides
    # stalls during which this process's garbage collector ran (``harness.watch.gc_watch``)
    gc_stalls: int = 0
    gc_stalled_ns: int = 0
    worst_stalls: list[dict[str, Any]] = field(default_factory=list)  # longest first
    # the CPU time the process spent while its probe watched, every thread's (the cost of
    # reading and stamping: ``report.client_figures.client_cost``)
    cpu_ns: int = 0

    def record_lags(self, lags_ns: array[int], watched_ns: int = 0, cpu_ns: int = 0) -> None:
        """The probe's lags, the time its ticks spanned and the process's CPU time in it
        (``LagProbe.take_lags``)."""
        if lags_ns:
            record_many(self.loop_lag, to_us(np.asarray(lags_ns, dtype=np.int64)))
        self.watched_ns += watched_ns
        self.cpu_ns += cpu_ns

    @property
    def held_share(self) -> float | None:
        """The share of the watched time the loop was held in stalls (merged: of every
        process's time); None where no probe watched. Over ``LOOP_SATURATED_SHARE`` the
        loop had too little time left to read and send on time, however late its reads
        seem (a batched read's delay is its batch's, which can miss that)."""
        if self.watched_ns <= 0:
            return None
        return min(1.0, self.stalled_ns / self.watched_ns)

    @property
    def saturated(self) -> bool:
        return loop_saturated(self.held_share)

    def note_stall(
        self, start_wall_ns: int, end_wall_ns: int, gc_generation: int | None = None
    ) -> None:
        """One stall window; ``gc_generation``: the collector ran in it (that generation)."""
        self.stalls += 1
        self.stalled_ns += end_wall_ns - start_wall_ns
        if gc_generation is not None:
            self.gc_stalls += 1
            self.gc_stalled_ns += end_wall_ns - start_wall_ns
        stall = {
            "ms": round((end_wall_ns - start_wall_ns) / 1e6, 3),
            "at_wall_s": round(end_wall_ns / 1e9, 3),
            "worker": None,
            "gc": gc_generation,
        }
        self._keep_worst([stall])

    def name_worker(self, worker: str) -> None:
        """On the master: which worker's loop these stalls were."""
        for stall in self.worst_stalls:
            stall["worker"] = stall.get("worker") or worker

    def _keep_worst(self, stalls: list[dict[str, Any]]) -> None:
        merged = sorted(self.worst_stalls + stalls, key=lambda stall: -stall["ms"])
        self.worst_stalls = merged[:WORST_STALLS_KEPT]

    def add(self, other: ClientHealth) -> None:
        add_into(self.loop_lag, other.loop_lag)
        self.stalls += other.stalls
        self.stalled_ns += other.stalled_ns
        self.watched_ns += other.watched_ns
        self.gc_stalls += other.gc_stalls
        self.gc_stalled_ns += other.gc_stalled_ns
        self.cpu_ns += other.cpu_ns
        if other.worst_stalls:
            self._keep_worst([dict(stall) for stall in other.worst_stalls])

    def add_scalars(self, scalars: Mapping[str, int], worst_stalls: list[dict[str, Any]]) -> None:
        """``add`` but for the lag histogram: a master adds a worker's lags as buckets
        (``wire_delta``); ``add`` stays the reference its test holds it to."""
        for name in CLIENT_SCALARS:
            setattr(self, name, getattr(self, name) + scalars[name])
        if worst_stalls:
            self._keep_worst([dict(stall) for stall in worst_stalls])

    def encode(self) -> dict[str, Any]:
        loop_lag = self.loop_lag.encode().decode("ascii") if self.loop_lag.total_count else None
        return {
            "loop_lag": loop_lag,
            "stalls": self.stalls,
            "stalled_ns": self.stalled_ns,
            "watched_ns": self.watched_ns,
            "gc_stalls": self.gc_stalls,
            "gc_stalled_ns": self.gc_stalled_ns,
            "cpu_ns": self.cpu_ns,
            "worst_stalls": self.worst_stalls,
        }

    @classmethod
    def decode(cls, data: dict[str, Any]) -> ClientHealth:
        health = cls(
            stalls=int(data.get("stalls", 0)),
            stalled_ns=int(data.get("stalled_ns", 0)),
            watched_ns=int(data.get("watched_ns", 0)),
            gc_stalls=int(data.get("gc_stalls", 0)),
            gc_stalled_ns=int(data.get("gc_stalled_ns", 0)),
            cpu_ns=int(data.get("cpu_ns", 0)),  # 0: saved before it was measured
        )
        health.worst_stalls = list(data.get("worst_stalls", []))
        if data.get("loop_lag"):
            try:
                health.loop_lag = decode_histogram(data["loop_lag"])
            except HistogramDecodeError as error:
                raise HistogramDecodeError(f"client.loop_lag: {error}") from None
        return health


__all__ = ["CLIENT_STALL", "ClientHealth", "StallWindows", "loop_saturated"]
