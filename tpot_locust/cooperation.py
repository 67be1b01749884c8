"""Yielding from long aggregation work so that streams get read in between.

``gevent.sleep(0)`` is not enough: it only queues the greenlet behind other callbacks, and
gevent runs queued callbacks, ones queued meanwhile included, for up to the switch interval
(5 ms) before it polls sockets again. Aggregation that yields with it a few hundred times
a second kept every socket unread for ~5 ms once a second, and each stream then read two
token events at once (benchmarks/README.md). A timer, however short, makes the loop poll
sockets at every yield: a stream whose data was ready is read before the aggregation's next
slice ends (libev may run the due timer first, then the socket's watcher).
"""

from __future__ import annotations

import time

import gevent

# Work between two yields of a ``WorkSlices`` loop: about a tenth of a fast decode step, so
# a stream's event waits at most this long behind aggregation (plus one item's work).
SLICE_NS = 200_000
# Short enough not to slow aggregation (at most one loop iteration per yield when sockets
# are ready; up to ~1 ms on an idle epoll loop, which only the aggregating greenlet waits).
_POLL_S = 1e-6


def let_streams_run() -> None:
    """Pause this greenlet until the event loop has polled sockets once."""
    gevent.sleep(_POLL_S)


class WorkSlices:
    """Yields once per ``slice_ns`` of work in a loop whose items cost anywhere from
    microseconds to milliseconds: a fixed count per yield either yields far too often
    (cheap items, each yield is a loop iteration) or blocks for milliseconds (costly ones)."""

    __slots__ = ("_since_ns", "_slice_ns")

    def __init__(self, slice_ns: int = SLICE_NS) -> None:
        self._slice_ns = slice_ns
        self._since_ns = time.perf_counter_ns()

    def after_item(self) -> None:
        """Call after each item: yields when the slice is used up."""
        if time.perf_counter_ns() - self._since_ns >= self._slice_ns:
            let_streams_run()
            self._since_ns = time.perf_counter_ns()
