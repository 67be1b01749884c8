"""Aggregation yields let waiting streams read their sockets before it resumes."""

from __future__ import annotations

from collections.abc import Callable

import gevent
import gevent.socket
import pytest

from tpot_locust.cooperation import let_streams_run


def order_of_events(yield_once: Callable[[], None]) -> list[str]:
    """A stream waits on a socket, data arrives, then an aggregator yields three times."""
    ours, theirs = gevent.socket.socketpair()
    order: list[str] = []

    def stream() -> None:
        ours.recv(1)
        order.append("read")

    reader = gevent.spawn(stream)
    gevent.sleep(0.01)  # the stream now waits for its socket
    theirs.send(b"x")
    for number in range(3):
        yield_once()
        order.append(f"yield {number}")
    reader.join(timeout=1)
    ours.close()
    theirs.close()
    return order


def test_streams_read_within_one_slice_of_work() -> None:
    # libev runs the due timer before the socket's watcher found by the same poll, so the
    # aggregator may do one more slice first; never more
    assert order_of_events(let_streams_run).index("read") <= 1


@pytest.mark.parametrize("yield_once", [lambda: gevent.sleep(0)], ids=["sleep(0)"])
def test_sleep_zero_does_not_poll_sockets(yield_once: Callable[[], None]) -> None:
    """Why ``let_streams_run`` exists: gevent runs queued callbacks before polling I/O."""
    assert order_of_events(yield_once).index("read") == 3
