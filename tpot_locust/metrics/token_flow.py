"""Tokens counted as their events arrive, for rates: histograms take a request's samples
when it ends, but a tokens/s over one interval must count the tokens of that interval.

Counted at the recorder's ticks (a few hundred live streams, a slice sum each), never per
event. Each ``Recorder`` owns one; a stream reaches it through ``StreamRequest.live`` (the
``wire.streaming.LiveStreams`` it implements), which the harness's users set from their
``harness.user_context``: the recorder never reads the wire's state behind its back.
"""

from __future__ import annotations

from array import array
from collections import Counter


class TokenFlow:
    """The live streams of this process and the tokens they received since the last take."""

    def __init__(self) -> None:
        # key -> (user class, the stream's growing k_i array, events already counted)
        self._live: dict[int, tuple[str, array[int], int]] = {}
        self._ended: Counter[str] = Counter()

    def start(self, key: int, user_class: str, token_counts: array[int]) -> None:
        self._live[key] = (user_class, token_counts, 0)

    def end(self, key: int, token_counts: array[int] | None = None) -> None:
        """The stream ended; ``token_counts``: its final counts, when they were replaced."""
        entry = self._live.pop(key, None)
        if entry is not None:
            user_class, counts, counted = entry
            final = counts if token_counts is None else token_counts
            self._ended[user_class] += sum(final[counted:])

    def take(self) -> Counter[str]:
        """Tokens per user class that arrived since the previous call."""
        taken, self._ended = self._ended, Counter()
        for key, (user_class, counts, counted) in self._live.items():
            if len(counts) > counted:
                taken[user_class] += sum(counts[counted:])
                self._live[key] = (user_class, counts, len(counts))
        return taken

    def clear(self) -> None:
        self._ended.clear()
        for key, (user_class, counts, _) in self._live.items():
            self._live[key] = (user_class, counts, len(counts))
