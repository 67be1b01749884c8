"""The yield that aggregation uses (``common.cooperation``): one poll of gevent's loop.

``gevent.sleep(0)`` is not enough: it only queues the greenlet behind other callbacks, and
gevent runs queued callbacks, ones queued meanwhile included, for up to the switch interval
(5 ms) before it polls sockets again. A timer, however short, makes the loop poll sockets
at every yield (benchmarks/README.md).
"""

from __future__ import annotations

import gevent

from tpot_locust.common.cooperation import use_yield

# Short enough not to slow aggregation (at most one loop iteration per yield when sockets
# are ready; up to ~1 ms on an idle epoll loop, which only the aggregating greenlet waits).
POLL_S = 1e-6


def poll_once() -> None:
    gevent.sleep(POLL_S)


def install() -> None:
    """Every process that reads streams under gevent: aggregation yields to its loop."""
    use_yield(poll_once)
