"""Server-wide pauses from the client's own data: every stream waited through one interval.

A continuous-batching server emits a token to every running stream at the end of each
step, so this process's streams, taken together, hear from the server every step. When none
of them heard anything for a stretch that a plain step does not take, the server paused
them all: a garbage collection, a scheduler hiccup, a CUDA synchronisation, an adapter
load, or a long prefill step (which ``metrics.explaining`` then tells apart by its size).
Whatever the server exports, that interval is a ``server_pause`` window.

``PauseFinder`` keeps the gaps this process held recently (``add``, as the recorder holds
them: every token of every stream passes there, live ones within a tick) and, when gaps are
tagged (``TAG_HOLD_S`` later, so the other streams' gaps over the same moment are in),
looks at each gap longer than ``PAUSE_FACTOR`` plain steps and ``MIN_PAUSE_NS`` beyond one
(``find``). Its core (the gap less ``EDGE_NS`` or ``EDGE_SHARE`` of it either side, where
the same step's tokens to other streams still land) is a pause when no token of this
process arrived in it and the gap is not one a stall of this process's loop may have
moved (a held loop delays every read stamped in user space alike: that is
``client_stall``; kernel stamps keep the silence true). The window is the whole
silence (from the last token this process heard before it to the first after), its size
the streams that waited through it; windows are shared with the other processes like the
others, and ``explaining`` sums them over every process that saw it.
"""

from __future__ import annotations

import itertools

import numpy as np

from tpot_locust.metrics.causes import SERVER_PAUSE, CauseWindow
from tpot_locust.metrics.stalls import PROCESS_TAG

PAUSE_FACTOR = 1.5  # a gap at least this many plain steps long may hold a pause
MIN_PAUSE_NS = 2_000_000  # and at least this long beyond one plain step
# One step's tokens reach this process's streams within this of each other: the larger of
# EDGE_NS and EDGE_SHARE of the gap (a busy server writes to many sockets one by one).
EDGE_NS = 1_000_000
EDGE_SHARE = 0.25
# The gaps kept reach back this far at most: memory bounded however long requests run (a
# busy process holds ~100k gaps a second); a silence begun before it is not looked into.
HORIZON_NS = 10_000_000_000


class PauseFinder:
    """This process's recent gaps, and the pause windows found among them."""

    def __init__(self) -> None:
        self._pending: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self._starts = np.zeros(0, dtype=np.int64)  # sorted, each on its own
        self._ends = np.zeros(0, dtype=np.int64)
        self._arrivals = np.zeros(0, dtype=np.int64)  # every token stamp held: gap ends, firsts
        self._found: list[tuple[int, int]] = []  # each window found: (start, end)
        self._ids = itertools.count()
        self._pruned_ns = 0  # what came before this is forgotten

    def add(self, starts: np.ndarray, ends: np.ndarray, first_token_wall_ns: int | None) -> None:
        """A stream's gaps (wall ns) as held; ``first_token_wall_ns``: its first token's
        stamp when these gaps begin with it."""
        arrivals = ends if first_token_wall_ns is None else np.append(ends, first_token_wall_ns)
        if starts.size or arrivals.size:
            self._pending.append((starts, ends, arrivals))

    def prune(self, before_wall_ns: int, now_wall_ns: int) -> None:
        """Forget the gaps that ended before ``before_wall_ns`` (no gap still to be tagged
        starts before it) or ``HORIZON_NS`` before ``now_wall_ns``. The same count of the
        smallest starts goes with them (they all began before it too), which keeps every
        later count of spanning gaps right."""
        before_wall_ns = max(before_wall_ns, now_wall_ns - HORIZON_NS)
        self._pruned_ns = max(self._pruned_ns, before_wall_ns)
        self._settle()
        gone = int(np.searchsorted(self._ends, before_wall_ns, side="left"))
        if gone:
            self._ends, self._starts = self._ends[gone:], self._starts[gone:]
        kept = int(np.searchsorted(self._arrivals, before_wall_ns, side="left"))
        self._arrivals = self._arrivals[kept:]
        self._found = [(start, end) for start, end in self._found if end >= before_wall_ns]

    def clear(self) -> None:
        self.__init__()  # type: ignore[misc]

    def _settle(self) -> None:
        if not self._pending:
            return
        starts, ends, arrivals = zip(*self._pending, strict=True)
        self._pending = []
        self._starts = np.sort(np.concatenate((self._starts, *starts)), kind="stable")
        self._ends = np.sort(np.concatenate((self._ends, *ends)), kind="stable")
        self._arrivals = np.sort(np.concatenate((self._arrivals, *arrivals)), kind="stable")

    def find(
        self, starts: np.ndarray, ends: np.ndarray, base_ns: float, distorted: np.ndarray | None
    ) -> list[CauseWindow]:
        """The new pause windows among gaps ``[starts, ends]`` (wall ns, being tagged);
        ``distorted``: the gaps a stall of this process may have moved (``client_stall``:
        stamped in user space while the loop was held), None when none was."""
        if base_ns <= 0:
            return []
        itl = ends - starts
        long_enough = max(PAUSE_FACTOR * base_ns, base_ns + MIN_PAUSE_NS)
        candidates = np.flatnonzero(itl >= long_enough)
        if not candidates.size:
            return []
        self._settle()
        # the silent ones at once (a noisy server can make many candidates): a core with no
        # token of this process in it
        edges = np.maximum(EDGE_NS, (EDGE_SHARE * itl[candidates]).astype(np.int64))
        core_starts = starts[candidates] + edges
        core_ends = ends[candidates] - edges
        arrivals = self._arrivals
        firsts = np.searchsorted(arrivals, core_starts, side="right")
        heard = np.zeros(candidates.size, dtype=bool)
        inside = firsts < arrivals.size
        heard[inside] = arrivals[firsts[inside]] < core_ends[inside]
        silent = ~heard & (core_ends > core_starts) & (core_starts >= self._pruned_ns)
        if distorted is not None:  # our own loop was held and these stamps are its reads'
            silent &= ~distorted[candidates]
        found: list[CauseWindow] = []
        for k in np.flatnonzero(silent).tolist():
            core_start, core_end = int(core_starts[k]), int(core_ends[k])
            if self._known(core_start, core_end):
                continue
            first = int(firsts[k])
            waited = int(np.searchsorted(self._starts, core_start, side="right")) - int(
                np.searchsorted(self._ends, core_start, side="right")
            )
            # the whole silence: from the last token heard before it to the first after
            start = int(arrivals[first - 1]) if first else core_start
            end = int(arrivals[first]) if first < arrivals.size else core_end
            window = CauseWindow(
                SERVER_PAUSE,
                f"pause:{PROCESS_TAG}:{next(self._ids)}",
                start,
                end,
                float(max(waited, 1)),
            )
            self._found.append((start, end))
            found.append(window)
        return found

    def _known(self, start: int, end: int) -> bool:
        """A window this process found already overlaps ``[start, end]``."""
        return any(s < end and e > start for s, e in self._found)
