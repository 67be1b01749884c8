"""Live streams followed while they go: their tokens (for tokens/s) and their token gaps
(for each interval's report), so that a stream longer than an interval, or than the run,
is measured as it streams, not only once it ends (docs/metrics.md, "The window").

Read at the recorder's ticks (a few hundred live streams, a slice each), never per event.
Each ``Recorder`` owns one; a stream reaches it through ``StreamRequest.live`` (the
``wire.streaming.LiveStreams`` it implements), which the harness's users set from their
``harness.users.user_context``: the recorder never reads the wire's state behind its back.

A stream's gaps are taken in order, each once: by ``take`` while it goes (all but its
newest gap, whose successor says whether a shared read moved it), and the rest by the
recorder when its request is recorded (``finished`` says how many were taken before).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from tpot_locust.common.timings import StreamSoFar


@dataclass(slots=True)
class _Live:
    group: str  # the figures' key (``common.metric_groups``)
    stream: StreamSoFar
    counted: int = 0  # token events whose tokens were counted
    taken: int = 0  # gaps taken (gap i: from event i to event i + 1)


@dataclass(slots=True)
class LiveGaps:
    """Gaps of a stream still going, taken at a tick: ``stamps`` holds one more event than
    there are gaps (gap i ends at ``stamps[i + 1]``), ``counts`` the tokens of the event
    each gap ends at, ``shared_next`` whether the gap after the last one is zero (the
    read that moved it, ``read_together``)."""

    group: str
    request_id: str
    first_gap: int  # the index in its stream of the first gap here
    t_send_ns: int
    stamps: np.ndarray
    counts: np.ndarray
    shared_next: bool
    recovered: bool
    network: bool
    first_tokens: int  # the tokens of its first event, when ``first_gap`` is 0
    answer_stamp_ns: int | None  # its first answer event's; before it: reasoning (None: all)


class TokenFlow:
    """The live streams of this process: tokens since the last take, gaps not yet taken."""

    def __init__(self) -> None:
        self._live: dict[str, _Live] = {}
        # ended streams whose request is not yet recorded: the recorder takes the rest
        self._ended: dict[str, _Live] = {}
        self._ended_tokens: Counter[str] = Counter()

    def start(self, request_id: str, group: str, stream: StreamSoFar) -> None:
        self._live[request_id] = _Live(group, stream)

    def end(self, request_id: str) -> None:
        """The stream ended (its final counts, if the decoder replaced them, are read now)."""
        entry = self._live.pop(request_id, None)
        if entry is None:
            return
        self._ended_tokens[entry.group] += sum(entry.stream.token_counts[entry.counted :])
        entry.counted = len(entry.stream.token_counts)
        self._ended[request_id] = entry

    def finished(self, request_id: str) -> int:
        """The gaps of a recorded request that ``take`` already handed over (0: none, or
        a request never followed, as a locustfile's own)."""
        entry = self._ended.pop(request_id, None) or self._live.pop(request_id, None)
        return 0 if entry is None else entry.taken

    def take(self) -> tuple[Counter[str], list[LiveGaps]]:
        """Tokens per group that arrived since the previous call, and the gaps of live
        streams not yet taken (all but each stream's newest)."""
        tokens, self._ended_tokens = self._ended_tokens, Counter()
        # a stream's request is recorded as it ends, with no yield between: one still here
        # never will be (a locustfile's own failure between the two), so it is let go
        self._ended.clear()
        gaps: list[LiveGaps] = []
        for request_id, entry in self._live.items():
            stream = entry.stream
            counts = stream.token_counts
            if len(counts) > entry.counted:
                tokens[entry.group] += sum(counts[entry.counted :])
                entry.counted = len(counts)
            if (taken := _take_gaps(request_id, entry)) is not None:
                gaps.append(taken)
        return tokens, gaps

    def clear(self) -> None:
        """Forget what came so far (a reset of the stats): streams go on from here."""
        self._ended_tokens.clear()
        self._ended.clear()
        for entry in self._live.values():
            entry.counted = len(entry.stream.token_counts)
            entry.taken = max(len(entry.stream.token_stamps) - 2, 0)


def _take_gaps(request_id: str, entry: _Live) -> LiveGaps | None:
    """A live stream's gaps from ``taken`` up to all but its newest one, or None."""
    stream = entry.stream
    stamps, counts = stream.token_stamps, stream.token_counts
    events = min(len(stamps), len(counts))  # a read may be appending one and not yet the other
    last = events - 2  # gaps 0..events-2: the newest waits for its successor
    if last <= entry.taken:
        return None
    first = entry.taken
    # slices are copies: a view would pin the arrays, which must still grow
    window = np.asarray(stamps[first : last + 2], dtype=np.int64)
    tokens = np.asarray(counts[first + 1 : last + 1], dtype=np.int64)
    entry.taken = last
    shared_next = bool(window[-1] == window[-2])
    return LiveGaps(
        entry.group,
        request_id,
        first,
        stream.t_send_ns,
        window[:-1],
        tokens,
        shared_next,
        stream.stamps_recovered(),
        stream.retransmitted(),
        counts[0] if first == 0 else 0,
        stream.answer_stamp_ns,
    )
