"""Tagging finished requests' token gaps with what overlapped them, once the windows came.

The recorder computes a finished request's gaps and hands them here (``hold``). They wait
``TAG_HOLD_S`` (other processes' windows travel through the master), then each gap gets
its causes from the cause timeline (``metrics.causes``: the silences ``metrics.pauses``
finds in this process's gaps are added to it first), of which ``metrics.explaining`` keeps
those that explain it, and this process's stall windows (``metrics.stalls``): copies of
its ITL and TPOT samples go into ``metric@<cause>``, into ``metric@none`` when nothing
overlapped it, and into ``metric@burst`` (the phase, a view of the prefill windows; steady
is the rest, taken apart where it is read); the gaps that enter this process's largest are
kept with their stories (``metrics.tail_gaps``). A pass hands what it tagged back, a batch
at a time (``TaggedSamples``), for the recorder to bucket: this module owns the rules, calls
nothing of the recorder's and knows nothing of the bucketing.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tpot_locust.common import metric_catalogue as catalogue
from tpot_locust.common.cooperation import WorkSlices
from tpot_locust.metrics.causes import (
    CAUSES,
    CLIENT_STALL,
    GPU_THROTTLE,
    NETWORK,
    PAUSE_MIN_STREAMS,
    PREFILL,
    SERVER_PAUSE,
    UNEXPLAINED,
    CauseTimeline,
    GapCauses,
)
from tpot_locust.metrics.explaining import GapScale
from tpot_locust.metrics.histogram_names import (
    CAUSE_METRICS,
    PHASE_METRICS,
    PREFILL_AT_GAP,
    phase_metric,
    stall_spanning,
)
from tpot_locust.metrics.pauses import PauseFinder
from tpot_locust.metrics.phases import BURST, STEADY, TAG_HOLD_S
from tpot_locust.metrics.samples import gap_samples_us
from tpot_locust.metrics.stalls import StallWindows
from tpot_locust.metrics.tail_gaps import TailFloor

# The stall-tagged metrics by what a stall must overlap to set their samples aside
# (``catalogue.stall_span``): each gap, any gap of its request, its largest, its send on
STALL_GAP = stall_spanning(catalogue.GAP)
STALL_ANY_GAP = stall_spanning(catalogue.ANY_GAP)
STALL_LARGEST_GAP = stall_spanning(catalogue.LARGEST_GAP)
STALL_FROM_SEND = stall_spanning(catalogue.FROM_SEND)


@dataclass
class HeldGaps:
    """A request's gaps inside the window (those of a stream still going, or the rest of
    one that ended), waiting to be tagged with their causes and stalls."""

    user_class: str
    request_id: str
    release_wall_ns: int
    send_wall_ns: int
    # the request's one-sample metrics (tagged as a whole): those it has, once it ended
    scalars: dict[str, float]
    starts_wall: np.ndarray
    ends_wall: np.ndarray
    itl_ns: np.ndarray
    counts: np.ndarray | None  # tokens per event, None when every event carried one
    # each per-gap metric's samples (us, ``samples.gap_samples_us``): a tag's samples too
    # when every gap has the tag (nearly always)
    samples: dict[str, np.ndarray]
    # Gaps a shared read distorted (None: none): a token event read together with a later
    # one carries that one's stamp, so the gap before it reads long and the next one zero.
    read_together: np.ndarray | None = None
    network: bool = False  # its connection retransmitted: every gap of it is ``network``
    # Every read cut into its segments' own stamps: a stall of this process's loop moved
    # none of them, so none is tagged ``client_stall``.
    recovered: bool = False
    first_gap: int = 0  # the index in its request of the first gap here

    @staticmethod
    def release_at() -> int:
        return time.time_ns() + int(TAG_HOLD_S * 1e9)


@dataclass
class TaggedSamples:
    """What one step of a tagging pass made: samples (microseconds) and scalars
    (nanoseconds) by figures' key and metric, and a class's new tail gaps."""

    samples: list[tuple[str, str, np.ndarray]] = field(default_factory=list)
    scalars: list[tuple[str, str, float]] = field(default_factory=list)
    tail_gaps: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    def add_samples(self, user_class: str, metric: str, values_us: np.ndarray) -> None:
        self.samples.append((user_class, metric, values_us))

    def add_scalar(self, user_class: str, metric: str, value_ns: float) -> None:
        self.scalars.append((user_class, metric, value_ns))


class GapTagger:
    """One process's held gaps, its cause timeline and stall windows, the pauses found in
    its gaps and what its gaps say a plain step and a prompt token cost."""

    def __init__(self) -> None:
        self.causes = CauseTimeline()  # every process's cause windows
        self.stalls = StallWindows()  # this process's own loop stalls
        self.pauses = PauseFinder()
        self.scale = GapScale()
        self.held: deque[HeldGaps] = deque()
        self._tail_floors: dict[str, TailFloor] = {}

    def hold(self, held: HeldGaps) -> None:
        self.held.append(held)
        first = held.starts_wall[0] if held.first_gap == 0 and held.starts_wall.size else None
        self.pauses.add(held.starts_wall, held.ends_wall, None if first is None else int(first))

    def clear(self) -> None:
        self.held.clear()
        self.stalls.clear()
        self.pauses.clear()
        self.scale = GapScale()
        self._tail_floors.clear()

    def tag(self, everything: bool, in_flight_sends: Iterable[int]) -> Iterator[TaggedSamples]:
        """Tag the held gaps whose hold is over (``everything``: all of them), each step's
        samples handed back as made (a batch's copies at most: bounded memory), then forget
        the windows no gap still to be tagged can overlap (``in_flight_sends``: the wall
        send times of this process's requests not yet held); consume it whole.

        Gaps are tagged a class's batch at a time (all its released requests, up to
        ``BATCH_GAPS`` gaps): a few numpy calls per batch, not per request, which kept
        the attribution's cost per request within a few microseconds."""
        now = time.time_ns()
        released: list[HeldGaps] = []
        while self.held and (everything or self.held[0].release_wall_ns <= now):
            released.append(self.held.popleft())
        slices = WorkSlices()
        batches: dict[str, list[tuple[HeldGaps, np.ndarray | None]]] = {}
        for held in released:
            in_stall = None
            if (self.stalls and not held.recovered) or held.read_together is not None:
                slices.after_item()
                tagged = TaggedSamples()
                in_stall = self._tag_stalls(tagged, held)
                yield tagged
            if held.itl_ns.size:
                batches.setdefault(held.user_class, []).append((held, in_stall))
        for user_class, batch in batches.items():
            tails: list[dict[str, Any]] = []
            for part in _parts(batch):
                slices.after_item()
                tagged = TaggedSamples()
                self._tag_batch(tagged, user_class, part, tails)
                yield tagged
            yield TaggedSamples(tail_gaps={user_class: tails})  # merged once: a merge costs K
        # held in the order they ended, not sent: a long request ends after shorter ones
        oldest = [held.send_wall_ns for held in self.held]
        oldest.extend(in_flight_sends)
        before = min(oldest) if oldest else now
        self.causes.prune(before)
        self.pauses.prune(before, now)

    def _tag_batch(
        self,
        sink: TaggedSamples,
        user_class: str,
        batch: list[tuple[HeldGaps, np.ndarray | None]],
        tails: list[dict[str, Any]],
    ) -> None:
        gaps = _BatchGaps.of(batch)
        self.scale.learn_steps(gaps.itl_ns)
        for window in self.pauses.find(gaps.starts, gaps.ends, self.scale.base_ns, gaps.in_stall):
            self.causes.add(window)
        self.causes.prefill_span_ns_per_token = self.scale.prefill_span()
        causes = self.causes.tags(gaps.starts, gaps.ends)
        self.scale.learn_prefill(gaps.itl_ns, causes.prefill_tokens)
        overlapped = causes.masks.get(PREFILL)
        paused = self.causes.longest_overlap(
            SERVER_PAUSE, gaps.starts, gaps.ends, causes.pause_streams >= PAUSE_MIN_STREAMS
        )
        throttled = causes.masks.get(GPU_THROTTLE)
        slowdown = None
        if throttled is not None:
            slowdown = self.causes.largest_size(GPU_THROTTLE, gaps.starts, gaps.ends, throttled)
        self.scale.weigh(gaps.itl_ns, causes, paused, slowdown)  # overlap in, cause out
        masks = causes.masks
        for kind, mask in ((CLIENT_STALL, gaps.in_stall), (NETWORK, gaps.network)):
            if mask is not None:  # with any timeline windows of the kind
                masks[kind] = mask | masks[kind] if kind in masks else mask
        # steady: the rest (interference)
        gaps.split(sink, user_class, PHASE_METRICS, (BURST, causes.in_burst))
        explained = np.zeros(gaps.itl_ns.shape, dtype=bool)
        for kind, mask in masks.items():
            explained |= mask
            if kind != CLIENT_STALL:
                gaps.split(sink, user_class, CAUSE_METRICS, (kind, mask))
        gaps.split(sink, user_class, CAUSE_METRICS, (UNEXPLAINED, ~explained))
        sink.add_samples(user_class, PREFILL_AT_GAP, causes.prefill_tokens)
        self._keep_tail(user_class, gaps, causes, overlapped, tails)

    def _keep_tail(
        self,
        user_class: str,
        gaps: _BatchGaps,
        found: GapCauses,
        overlapped: np.ndarray | None,
        kept: list[dict[str, Any]],
    ) -> None:
        """The batch's gaps that enter this process's largest, each with its causes (and a
        prefill that overlapped it without explaining it)."""
        masks = found.masks
        floor = self._tail_floors.setdefault(user_class, TailFloor())
        chosen = floor.candidates(gaps.itl_ns)
        if not chosen.size:
            return
        owners = np.searchsorted(gaps.offsets, chosen, side="right") - 1
        for index, owner in zip(chosen.tolist(), owners.tolist(), strict=True):
            causes = [kind for kind in CAUSES if kind in masks and masks[kind][index]]
            kept.append(
                {
                    "ms": round(int(gaps.itl_ns[index]) / 1e6, 3),
                    "at_wall_s": round(int(gaps.ends[index]) / 1e9, 3),
                    "request_id": gaps.request_ids[owner],
                    "gap": index - int(gaps.offsets[owner]) + gaps.first_gaps[owner],
                    "causes": causes,
                    "prefill_tokens": int(found.prefill_tokens[index]),
                    "prefill_requests": int(found.prefill_requests[index]),
                    "prefill_overlapped": overlapped is not None and bool(overlapped[index]),
                    "pause_streams": int(found.pause_streams[index]),
                    "phase": BURST if found.in_burst[index] else STEADY,
                    "client_stall": CLIENT_STALL in causes,
                }
            )

    def _tag_stalls(self, sink: TaggedSamples, held: HeldGaps) -> np.ndarray:
        """Copies of the samples of a request whose stamps were not all recovered that
        overlap a stall, or that a shared read distorted (a hold of the loop too short for
        a stall window can still merge events sent closer together than it), into
        ``metric@client_stall``; returns which gaps."""
        user_class = held.user_class
        in_stall = self.stalls.overlaps(held.starts_wall, held.ends_wall)
        if held.read_together is not None:
            in_stall |= held.read_together
        tagged: list[str] = []
        if in_stall.any():
            counts = None if held.counts is None else held.counts[in_stall]
            samples = gap_samples_us(held.itl_ns[in_stall], counts)
            for name in STALL_GAP:
                sink.add_samples(user_class, phase_metric(name, CLIENT_STALL), samples[name])
            tagged += STALL_ANY_GAP
            if in_stall[int(np.argmax(held.itl_ns))]:
                tagged += STALL_LARGEST_GAP
        send, scalars = held.send_wall_ns, held.scalars
        for name in STALL_FROM_SEND:
            if name in scalars:
                at = np.array([send + scalars[name]])
                tagged += [name] * bool(self.stalls.overlaps(np.array([send]), at)[0])
        for name in tagged:
            if name in held.scalars:
                sink.add_scalar(user_class, phase_metric(name, CLIENT_STALL), held.scalars[name])
        return in_stall


BATCH_GAPS = 65_536  # gaps tagged together (~a few ms of numpy), a yield between batches


def _parts(
    batch: list[tuple[HeldGaps, np.ndarray | None]],
) -> list[list[tuple[HeldGaps, np.ndarray | None]]]:
    """The batch cut into parts of at most ``BATCH_GAPS`` gaps (a request is never cut)."""
    parts: list[list[tuple[HeldGaps, np.ndarray | None]]] = [[]]
    size = 0
    for item in batch:
        if size and size + item[0].itl_ns.size > BATCH_GAPS:
            parts.append([])
            size = 0
        parts[-1].append(item)
        size += item[0].itl_ns.size
    return parts


@dataclass
class _BatchGaps:
    """The gaps of several requests of one class, end to end."""

    request_ids: list[str]
    first_gaps: list[int]  # the index in its request of each part's first gap
    offsets: np.ndarray  # where each request's gaps begin
    starts: np.ndarray
    ends: np.ndarray
    itl_ns: np.ndarray
    counts: np.ndarray | None  # tokens per event; None when every event carried one
    samples: dict[str, np.ndarray]  # the whole batch's, for a tag every gap has
    in_stall: np.ndarray | None  # None: no gap of the batch overlapped a stall
    network: np.ndarray | None  # the gaps of requests whose connection retransmitted

    @classmethod
    def of(cls, batch: list[tuple[HeldGaps, np.ndarray | None]]) -> _BatchGaps:
        helds = [held for held, _ in batch]
        sizes = [held.itl_ns.size for held in helds]
        offsets = np.concatenate(([0], np.cumsum(sizes[:-1]))).astype(np.int64)
        counts = None
        if any(held.counts is not None for held in helds):
            counts = np.concatenate(
                [
                    held.counts if held.counts is not None else np.ones(held.itl_ns.size, np.int64)
                    for held in helds
                ]
            )
        in_stall = None
        if any(stall is not None and stall.any() for _, stall in batch):
            in_stall = np.concatenate(
                [
                    stall if stall is not None else np.zeros(held.itl_ns.size, dtype=bool)
                    for held, stall in batch
                ]
            )

        network = None
        if any(held.network for held in helds):
            network = np.repeat(np.array([held.network for held in helds]), sizes)

        names = helds[0].samples.keys()

        def joined(name: str) -> np.ndarray:
            return np.concatenate([getattr(held, name) for held in helds])

        return cls(
            [held.request_id for held in helds],
            [held.first_gap for held in helds],
            offsets,
            joined("starts_wall"),
            joined("ends_wall"),
            joined("itl_ns"),
            counts,
            {name: np.concatenate([held.samples[name] for held in helds]) for name in names},
            in_stall,
            network,
        )

    def split(
        self,
        sink: TaggedSamples,
        user_class: str,
        metrics: tuple[str, ...],
        part: tuple[str, np.ndarray],
    ) -> None:
        """The samples of ``metrics`` (per-gap ones) in ``part``'s ``(tag, mask)`` into
        ``metric@tag``."""
        tag, mask = part
        if not mask.any():
            return
        samples = self.samples
        if not mask.all():  # else the whole samples, as they are (nearly always)
            counts = None if self.counts is None else self.counts[mask]
            samples = gap_samples_us(self.itl_ns[mask], counts)
        for name in metrics:
            sink.add_samples(user_class, phase_metric(name, tag), samples[name])


def read_together(gaps_ns: np.ndarray, next_shared: bool = False) -> np.ndarray | None:
    """The gaps a shared read distorted (None: none): events a read returned together
    carry one stamp, so the gap before such an event reads long and the next zero; both are
    marked. ``next_shared``: the gap after the last one here is zero (a live part's, whose
    successor waits for the next take)."""
    shared: np.ndarray = gaps_ns == 0
    if not next_shared and not shared.any():
        return None
    together: np.ndarray = shared.copy()
    together[:-1] |= shared[1:]
    if next_shared and together.size:
        together[-1] = True
    return together
