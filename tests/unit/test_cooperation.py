"""Aggregation yields let waiting streams read their sockets before it resumes."""

from __future__ import annotations

import time
from collections.abc import Callable

import gevent
import gevent.socket
import pytest

from tpot_locust.common import cooperation
from tpot_locust.common.cooperation import let_streams_run
from tpot_locust.harness.watch import loop_yield

loop_yield.install()  # aggregation's yield: one poll of gevent's loop


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


@pytest.mark.parametrize(
    ("item_s", "items", "fewest", "most"), [(0.00002, 200, 1, 100), (0.001, 10, 10, 10)]
)
def test_work_slices_yield_by_time_not_by_count(
    monkeypatch: pytest.MonkeyPatch, item_s: float, items: int, fewest: int, most: int
) -> None:
    """Cheap items share a yield (each yield costs a loop iteration); an item longer than
    a slice is followed by a yield of its own."""
    yields: list[float] = []
    monkeypatch.setattr(cooperation, "let_streams_run", lambda: yields.append(time.perf_counter()))
    slice_ns = 200_000
    slices = cooperation.WorkSlices(slice_ns=slice_ns)
    started_ns = time.perf_counter_ns()
    for _ in range(items):
        busy_until = time.perf_counter() + item_s  # wall time: preemption cannot shorten it
        while time.perf_counter() < busy_until:
            pass
        slices.after_item()
    # at most one yield per slice of time spent (a preempted item takes longer, so a busy
    # machine may see more yields than the unloaded count, never more than this)
    assert len(yields) <= (time.perf_counter_ns() - started_ns) // slice_ns + 1
    assert fewest <= len(yields) <= most
