"""One timeline of cause windows: what was going on while a token gap was open.

A *cause window* is a span of wall-clock time (ns since the epoch, comparable across
processes) with a kind and a size:

- ``prefill``: one request of the run, from its send to its first token; size = its prompt
  tokens. A scheduled burst request is one case of it (``burst`` set).
- ``client_stall``: this process's event loop could not run (``metrics.stalls``); local to
  the process whose stamps it distorts, never shared.
- ``preemption``, ``kv_pressure``, ``queueing``, ``server_gc``: server windows, from two
  consecutive samples of the server's own metrics (the counter of preemptions rose; KV
  cache usage at or above ``KV_PRESSURE_AT``; requests waiting; the full collections of
  its Python process, ``python_gc_collections_total{generation="2"}``, rose); size = the
  preemptions, the usage (0..1), the requests waiting or the collections.
- ``kv_offload``: between two samples where the server brought KV cache back from CPU
  memory (vLLM's ``kv_offload_load_bytes``, SGLang's HiCache ``load_back_*``) or stored a
  preempted sequence's KV there (vLLM's ``kv_offload_store_bytes``); size = how much, both
  ways (bytes or tokens). Its transfers hold the step every stream waits on.
- ``gpu_throttle``: from two consecutive samples of a DCGM exporter (``server.gpu_metrics``):
  a GPU's clock event reasons had a slowing one set at either end (a power cap, a thermal
  slowdown, a power brake); size = the lowest SM clock (MHz) at either end, made by the
  sampler how much slower than the highest clock it saw that ran (0.6: steps 1.6x as long).
- ``server_pause``: every stream of a process waited through the same interval (no token
  arrived on any of them), not within ``metrics.pauses``; size = how many streams waited.
  A gap is ``server_pause`` where such windows, summed over every process, held at least
  ``PAUSE_MIN_STREAMS`` streams and what prefill can account for leaves most of it
  unexplained (``metrics.explaining``).
- ``network``: a request whose connection saw retransmissions between its send and its end
  (``wire.tcp_info``: ours and the server's); it tags that request's own gaps only, so it
  is a mask on them, not a window here.

Every recording process fills a ``CauseTimeline`` with its own windows and the ones the
master relays, then tags each token gap with every kind whose windows overlap it, and with
the prompt tokens in prefill at that moment. Overlap is not cause: ``metrics.explaining``
then keeps ``prefill`` only where the prompts in flight can account for the gap
(``explains``). Overlap is counted with two sorted arrays per
kind (starts and ends): windows overlapping gap ``[a, b]`` = windows started before ``b``
minus windows ended by ``a``, two ``searchsorted`` calls for a whole request.
"""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass, replace
from typing import Any, Final

import numpy as np

PREFILL = "prefill"
CLIENT_STALL: Final = "client_stall"  # Final: a summary's typed key too
PREEMPTION = "preemption"
KV_PRESSURE = "kv_pressure"
QUEUEING = "queueing"
SERVER_GC = "server_gc"
GPU_THROTTLE = "gpu_throttle"
KV_OFFLOAD = "kv_offload"
SERVER_PAUSE = "server_pause"
NETWORK = "network"
SERVER_CAUSES = (PREEMPTION, KV_PRESSURE, QUEUEING, SERVER_GC, KV_OFFLOAD, GPU_THROTTLE)
CAUSES = (PREFILL, SERVER_PAUSE, *SERVER_CAUSES, NETWORK, CLIENT_STALL)
UNEXPLAINED = "none"  # the share of tail gaps that overlapped no cause window
KV_PRESSURE_AT = 0.95  # KV cache usage (0..1) from which a server window is kv_pressure
OPEN_END = np.iinfo(np.int64).max  # a window still open reaches every later gap
# A cause explains a gap when it accounts for at least this share of the gap's stretch (the
# simulator's truth: of the prefill and pause time in its steps; ours: of its excess over a
# plain step). Both sides call ``explains``.
EXPLAINS_SHARE = 1 / 3
PAUSE_MIN_STREAMS = 3  # streams, over every process, that waited together: a server pause


def explains(part: np.ndarray, whole: np.ndarray) -> np.ndarray:
    """Per gap: ``part`` (ns) is a positive share of at least ``EXPLAINS_SHARE`` of
    ``whole`` (ns)."""
    return (part > 0) & (part >= EXPLAINS_SHARE * whole)


@dataclass(frozen=True, slots=True)
class CauseWindow:
    """One window; ``end_wall_ns`` is None while it is open (a prefill still running)."""

    kind: str
    window_id: str
    start_wall_ns: int
    end_wall_ns: int | None
    size: float = 0.0  # prefill: prompt tokens; preemption: count; kv_pressure: usage; ...
    burst: bool = False  # prefill: a request of the scenario's ``bursts:`` schedule

    def to_wire(self) -> list[Any]:
        """The compact form relayed between processes (msgpack/JSON-safe)."""
        return [
            self.kind,
            self.window_id,
            self.start_wall_ns,
            self.end_wall_ns,
            self.size,
            self.burst,
        ]

    @classmethod
    def from_wire(cls, item: list[Any]) -> CauseWindow:
        kind, window_id, start, end, size, burst = item
        return cls(
            str(kind),
            str(window_id),
            int(start),
            None if end is None else int(end),
            float(size),
            bool(burst),
        )


FAILED_END = -1  # on the wire: a prefill that failed before its first token (no window)
FORGOTTEN_KEPT = 100_000  # pruned window ids remembered (a late relayed open comes in s)
LONG_PROMPT_TOKENS = 2048  # a prefill this long puts the gaps it overlaps in the burst phase


@dataclass
class _KindIndex:
    """One kind's windows as sorted arrays, for counting overlaps in bulk."""

    starts: np.ndarray  # sorted
    ends: np.ndarray  # sorted (OPEN_END for an open window)
    sizes_by_start: np.ndarray  # cumulative sizes in ``starts`` order, with a leading 0
    sizes_by_end: np.ndarray  # cumulative sizes in ``ends`` order, with a leading 0

    @classmethod
    def of(cls, windows: list[CauseWindow]) -> _KindIndex:
        starts = np.array([w.start_wall_ns for w in windows], dtype=np.int64)
        ends = np.array(
            [OPEN_END if w.end_wall_ns is None else w.end_wall_ns for w in windows], dtype=np.int64
        )
        sizes = np.array([w.size for w in windows], dtype=np.float64)
        by_start, by_end = np.argsort(starts, kind="stable"), np.argsort(ends, kind="stable")
        return cls(
            starts[by_start],
            ends[by_end],
            np.concatenate(([0.0], np.cumsum(sizes[by_start]))),
            np.concatenate(([0.0], np.cumsum(sizes[by_end]))),
        )

    def counts(self, gap_starts: np.ndarray, gap_ends: np.ndarray) -> tuple[np.ndarray, ...]:
        """Per gap [a, b]: the windows that overlap it (started before b, not ended by a),
        and the sum of their sizes."""
        started = np.searchsorted(self.starts, gap_ends, side="left")
        ended = np.searchsorted(self.ends, gap_starts, side="right")
        return started - ended, self.sizes_by_start[started] - self.sizes_by_end[ended]


@dataclass
class GapCauses:
    """What overlapped each gap of one request: a mask per kind that had any, the prompt
    tokens in prefill at that moment, and which gaps overlapped a long prefill (burst)."""

    masks: dict[str, np.ndarray]
    prefill_tokens: np.ndarray  # int64, one per gap
    prefill_requests: np.ndarray  # how many prefills overlapped each gap
    in_burst: np.ndarray
    pause_streams: np.ndarray  # streams that waited in the pause windows it overlapped


class CauseTimeline:
    """Every cause window this process knows (its own and those the master relayed).

    Windows are kept only while a gap of this process may still overlap them: ``prune``
    forgets the ones that ended before the oldest request still to be tagged. The
    scheduled bursts are also kept for the run's facts (``bursts``), whole.
    """

    def __init__(self, long_prompt_tokens: int = LONG_PROMPT_TOKENS) -> None:
        self.long_prompt_tokens = long_prompt_tokens
        self.sharing = False  # distributed: queue own windows for the others (take_outgoing)
        self._windows: dict[str, CauseWindow] = {}
        self._ends: list[tuple[int, str]] = []  # closed windows' (end, id): a min-heap, to prune
        self._failed: set[str] = set()  # prefills that never gave a first token
        self._forgotten: set[str] = set()  # pruned ids (the last FORGOTTEN_KEPT)
        self._forgotten_order: deque[str] = deque()
        self._outgoing: list[list[Any]] = []
        self._index: dict[str, _KindIndex] | None = None
        self.bursts = BurstArchive()
        self.archive: PrefillArchive | None = None  # on the reporting process: every prefill
        # A prompt's own prefill runs at the end of its window (send to first token), the
        # rest is queueing: with this set (ns a prompt token, margin included), a closed
        # prefill window counts only for its last ``size x`` that (``metrics.explaining``)
        self.prefill_span_ns_per_token: float | None = None
        self._index_span: float | None = None

    def __len__(self) -> int:
        return len(self._windows)

    def add(self, window: CauseWindow, share: bool = True) -> None:
        """Open, close or add a window; ``share``: also queue it for the other processes
        (when this process shares at all: a worker or a master)."""
        if self._apply(window) and share and self.sharing:
            self._outgoing.append(window.to_wire())

    def add_all(self, windows: list[CauseWindow]) -> None:
        """Windows found elsewhere (the server's samplers), each as ``add``."""
        for window in windows:
            self.add(window)

    def keep_prefills(self) -> None:
        """Keep every prefill window from now on, to draw them (the reporting process)."""
        self.archive = PrefillArchive()

    def fail(self, kind: str, window_id: str, burst: bool = False, share: bool = True) -> None:
        """A prefill that ended with no first token: it ran no prefill, so no window."""
        self.add(CauseWindow(kind, window_id, 0, FAILED_END, 0.0, burst), share)

    def apply_wire(self, items: list[list[Any]]) -> None:
        """Windows relayed from other processes (and this one's own, idempotently)."""
        for item in items:
            self._apply(CauseWindow.from_wire(item))

    def take_outgoing(self) -> list[list[Any]]:
        taken, self._outgoing = self._outgoing, []
        return taken

    def _apply(self, window: CauseWindow) -> bool:
        window_id = window.window_id
        if window_id in self._failed or window_id in self._forgotten:
            return False  # failed, or closed and pruned: a late echo of it changes nothing
        if window.end_wall_ns == FAILED_END:
            self._windows.pop(window_id, None)
            self._failed.add(window_id)
            self._index = None
            if window.burst:
                self.bursts.failed += 1
            return True
        known = self._windows.get(window_id)
        if known is not None and known.end_wall_ns is not None:
            return False  # closed already: a late "open" must not reopen it
        if window.end_wall_ns is not None and window.end_wall_ns <= window.start_wall_ns:
            # closed with no length: it overlaps nothing; the others must drop it too
            self._forget(window_id)
            if known is None:
                return False
            del self._windows[window_id]
            self._index = None
            return True
        self._windows[window_id] = window
        self._index = None
        if window.end_wall_ns is not None:
            heapq.heappush(self._ends, (window.end_wall_ns, window_id))
            if window.burst:
                self.bursts.add(window.start_wall_ns, window.end_wall_ns)
            if self.archive is not None and window.kind == PREFILL:
                self.archive.add(window)
        return True

    def prune(self, before_wall_ns: int) -> None:
        """Forget closed windows that ended before ``before_wall_ns`` (no gap left to tag
        can overlap them)."""
        ends = self._ends
        while ends and ends[0][0] < before_wall_ns:
            _, window_id = heapq.heappop(ends)
            if self._windows.pop(window_id, None) is not None:
                self._index = None
                self._forget(window_id)

    def _forget(self, window_id: str) -> None:
        """Remember (a bounded number of) pruned ids, so a late open cannot reopen one."""
        if len(self._forgotten_order) >= FORGOTTEN_KEPT:
            self._forgotten.discard(self._forgotten_order.popleft())
        self._forgotten_order.append(window_id)
        self._forgotten.add(window_id)

    def clear(self) -> None:
        self._forgotten.clear()
        self._forgotten_order.clear()
        self._windows.clear()
        self._ends.clear()
        self._failed.clear()
        self._outgoing.clear()
        self._index = None
        self.bursts = BurstArchive()
        if self.archive is not None:
            self.archive = PrefillArchive()

    def _indexes(self) -> dict[str, _KindIndex]:
        span = self.prefill_span_ns_per_token
        if self._index is None or span != self._index_span:
            self._index_span = span
            by_kind: dict[str, list[CauseWindow]] = {}
            for window in self._windows.values():
                by_kind.setdefault(window.kind, []).append(_narrowed(window, span))
                if window.kind == PREFILL and (
                    window.burst or window.size >= self.long_prompt_tokens
                ):
                    by_kind.setdefault(_LONG_PREFILL, []).append(window)
            self._index = {kind: _KindIndex.of(found) for kind, found in by_kind.items()}
        return self._index

    def tags(self, gap_starts: np.ndarray, gap_ends: np.ndarray) -> GapCauses:
        """The causes of each gap (wall ns arrays of one request)."""
        masks: dict[str, np.ndarray] = {}
        prefill_tokens = np.zeros(gap_starts.shape, dtype=np.int64)
        prefill_requests = prefill_tokens
        in_burst = np.zeros(gap_starts.shape, dtype=bool)
        pause_streams = prefill_tokens
        for kind, index in self._indexes().items():
            overlapping, sizes = index.counts(gap_starts, gap_ends)
            mask = overlapping > 0
            if kind == _LONG_PREFILL:
                in_burst = mask
                continue
            if mask.any():
                masks[kind] = mask
            if kind == PREFILL:
                prefill_tokens = np.rint(np.maximum(sizes, 0)).astype(np.int64)
                prefill_requests = overlapping
            elif kind == SERVER_PAUSE:
                pause_streams = np.rint(np.maximum(sizes, 0)).astype(np.int64)
        return GapCauses(masks, prefill_tokens, prefill_requests, in_burst, pause_streams)

    def longest_overlap(
        self, kind: str, gap_starts: np.ndarray, gap_ends: np.ndarray, among: np.ndarray
    ) -> np.ndarray:
        """Per gap (ns): the longest stretch of it one window of ``kind`` covered; computed
        for the gaps in ``among`` only (0 elsewhere), windows being few beside gaps."""
        return self._per_gap(kind, gap_starts, gap_ends, among, by_size=False)

    def largest_size(
        self, kind: str, gap_starts: np.ndarray, gap_ends: np.ndarray, among: np.ndarray
    ) -> np.ndarray:
        """Per gap: the largest size of a window of ``kind`` that overlaps it (``among``
        only, 0 elsewhere): a throttle's slowdown, not a sum of its neighbours'."""
        return self._per_gap(kind, gap_starts, gap_ends, among, by_size=True)

    def _per_gap(
        self,
        kind: str,
        gap_starts: np.ndarray,
        gap_ends: np.ndarray,
        among: np.ndarray,
        by_size: bool,
    ) -> np.ndarray:
        found = np.zeros(gap_starts.shape, dtype=np.float64 if by_size else np.int64)
        windows = [w for w in self._windows.values() if w.kind == kind]
        if not windows or not among.any():
            return found
        picked = np.flatnonzero(among)
        a, b = gap_starts[picked], gap_ends[picked]
        best = found[picked]
        for window in windows:  # windows of a kind are few, gaps many: one pass a window
            end = OPEN_END if window.end_wall_ns is None else window.end_wall_ns
            overlap = np.minimum(end, b) - np.maximum(window.start_wall_ns, a)
            if by_size:
                best = np.where(overlap > 0, np.maximum(best, window.size), best)
            else:
                best = np.maximum(best, overlap)
        found[picked] = np.maximum(best, 0)
        return found


def _narrowed(window: CauseWindow, span_ns_per_token: float | None) -> CauseWindow:
    """A closed prefill window cut to the last ``size x span`` of it (its prefill, not its
    queueing); any other window as it is."""
    end = window.end_wall_ns
    if window.kind != PREFILL or span_ns_per_token is None or end is None:
        return window
    start = max(window.start_wall_ns, end - round(window.size * span_ns_per_token))
    return replace(window, start_wall_ns=min(start, end - 1))


_LONG_PREFILL = "prefill:long"  # an index of its own: the prefills that make the burst phase


class BurstArchive:
    """The scheduled bursts' prefill windows of the run (wall ns), for its facts and charts."""

    def __init__(self) -> None:
        self.spans: list[tuple[int, int]] = []
        self.failed = 0  # burst requests that failed before their first token

    def __len__(self) -> int:
        return len(self.spans)

    def add(self, start_wall_ns: int, end_wall_ns: int) -> None:
        self.spans.append((start_wall_ns, end_wall_ns))

    def spans_wall_ns(self) -> list[tuple[int, int]]:
        return sorted(self.spans)

    def durations_s(self) -> list[float]:
        return [(end - start) / 1e9 for start, end in self.spans]


class PrefillArchive:
    """Every closed prefill window of the run, compactly: the timeline of prompt tokens in
    prefill that the report draws under the tail."""

    def __init__(self) -> None:
        self.starts: list[int] = []
        self.ends: list[int] = []
        self.sizes: list[float] = []

    def __len__(self) -> int:
        return len(self.starts)

    def add(self, window: CauseWindow) -> None:
        assert window.end_wall_ns is not None
        self.starts.append(window.start_wall_ns)
        self.ends.append(window.end_wall_ns)
        self.sizes.append(window.size)

    def tokens_series(self, origin_wall_ns: int, points: int = 1000) -> list[list[float]]:
        """[[seconds since ``origin_wall_ns``, the most prompt tokens in prefill at once in
        that bin], ...]: at most ``points`` bins over the windows' span, peaks kept."""
        if not self.starts:
            return []
        starts = np.array(self.starts, dtype=np.int64)
        ends = np.array(self.ends, dtype=np.int64)
        sizes = np.array(self.sizes, dtype=np.float64)
        # the level changes only at window edges: evaluate it there, then keep each bin's peak
        edges = np.concatenate((starts, ends))
        deltas = np.concatenate((sizes, -sizes))
        order = np.lexsort((deltas, edges))  # at a shared edge the ends first: touching adds none
        edges, level = edges[order], np.cumsum(deltas[order])
        first, last = int(edges[0]), int(edges[-1])
        width = max((last - first) / points, 1.0)
        bins = np.minimum(((edges - first) / width).astype(np.int64), points - 1)
        peaks = np.zeros(points)
        np.maximum.at(peaks, bins, level)
        used = np.unique(bins)
        return [
            [round((first + b * width - origin_wall_ns) / 1e9, 3), round(float(peaks[b]))]
            for b in used
        ]
