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

import gevent

# Short enough not to slow aggregation (at most one loop iteration per yield when sockets
# are ready; up to ~1 ms on an idle epoll loop, which only the aggregating greenlet waits).
_POLL_S = 1e-6


def let_streams_run() -> None:
    """Pause this greenlet until the event loop has polled sockets once."""
    gevent.sleep(_POLL_S)
