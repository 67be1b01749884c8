"""Reading a streamed body from inside gevent's event loop, one callback per ready socket.

Why: a greenlet that reads its own socket pays, per read, a read that fails (EAGAIN), a
timer for the read timeout, a switch to the event loop and one back (reading here took
the client's CPU per token event from 36-43 to 25 us at 5 ms x 64 streams, measured in
benchmarks/README.md). Here the loop calls back when the socket is
readable, the callback reads once and hands the payload to the consumer right there, and
the request's deadline is watched by one timer per stream that is re-armed only when it
fires early. The waiting greenlet is woken once, when the body ends. Each read goes through
``Response.absorb``, the step the greenlet's own loop (``Response.read_into``) takes too,
which is where this cannot work (no gevent), with the same results.
"""

from __future__ import annotations

import time
from typing import Any

from gevent import get_hub
from gevent.hub import Waiter

from tpot_locust.wire.http_client import Consume, ReadTimeout, Response
from tpot_locust.wire.plain_runs import PlainRuns
from tpot_locust.wire.stamped_socket import Run

# The event-loop reader is used wherever it can be; False reads in the greenlet (kept for
# side-by-side measurements, see benchmarks/common.py).
ENABLED = True
_READ = 1  # libev/libuv: watch for readability


def read_body(response: Response, consume: Consume, runs: PlainRuns | None = None) -> None:
    """Hand every payload of the body to ``consume(arrival_ns, payload)``, then return;
    reads that are runs of plain token events go to ``runs`` whole instead.

    Ends, raises and leaves ``response`` (``complete``, ``reset``) exactly as
    ``response.read_into`` would; what ``consume`` (or ``runs``) raises ends the body read
    and is raised here. ``consume`` may move ``response.deadline``.
    """
    fileno = response.connection.loop_fileno() if ENABLED else None
    if fileno is None:
        response.read_into(consume)
    elif not response.begin(consume, None if runs is None else runs.take_pieces):
        _LoopRead(response, consume, fileno, runs).wait()


class _LoopRead:
    """The callbacks and state of one body read in the event loop."""

    __slots__ = ("_consume", "_failure", "_hub", "_response", "_runs", "_timer", "_waiter",
                 "_watcher")  # fmt: skip

    def __init__(self, response: Response, consume: Consume, fileno: int,
                 runs: PlainRuns | None = None) -> None:  # fmt: skip
        self._response = response
        self._consume = consume
        self._runs = runs
        self._hub = get_hub()
        self._waiter = Waiter(self._hub)
        self._watcher = self._hub.loop.io(fileno, _READ)
        self._timer: Any | None = None  # gevent's loop timer, once armed
        self._failure: BaseException | None = None

    def wait(self) -> None:
        """Block this greenlet until the body has ended; raise why it ended early."""
        self._watcher.start(self._on_readable)
        self._arm(self._response.deadline.at_ns - time.perf_counter_ns())
        try:
            self._waiter.get()
        finally:
            self._stop()
            if not self._response.complete and self._failure is None:
                # cut off (the user was stopped): the rest of the body is never read
                self._response.connection.close()
        if self._failure is not None:
            raise self._failure

    def _on_readable(self) -> None:
        response = self._response
        try:
            split = self._runs.splitter() if self._runs is not None else None
            if split is None:
                pieces = response.connection.read_ready()
            else:
                got = response.connection.read_ready_run(split)
                if type(got) is Run:
                    self._runs.take(got.found, got.stamps)  # type: ignore[union-attr]
                    got = got.rest
                pieces = got  # type: ignore[assignment]
            if not pieces:
                return
            for data, stamp in pieces:
                if response.absorb(data, stamp, self._consume):
                    break
            else:
                return
        except ConnectionResetError:
            response.peer_closed(reset=True)
        except Exception as error:  # noqa: BLE001 - raised in the waiting greenlet instead
            self._failure = error
        self._end()

    def _on_deadline(self) -> None:
        left_ns = self._response.deadline.at_ns - time.perf_counter_ns()
        if left_ns > 0:
            self._arm(left_ns)  # the deadline moved on since the timer was set
            return
        self._failure = ReadTimeout()
        self._end()

    def _arm(self, delay_ns: int) -> None:
        if self._timer is not None:
            self._timer.close()
        self._timer = self._hub.loop.timer(max(delay_ns, 0) / 1e9)
        self._timer.start(self._on_deadline)

    def _end(self) -> None:
        self._stop()
        self._waiter.switch(None)

    def _stop(self) -> None:
        self._watcher.close()
        if self._timer is not None:
            self._timer.close()
