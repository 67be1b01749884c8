"""Reading a streamed body from inside gevent's event loop, one callback per ready socket.

Why: a greenlet that reads its own socket pays, per read, a read that fails (EAGAIN), a
timer for the read timeout, a switch to the event loop and one back (reading here took
the client's CPU per token event from 36-43 to 25 us at 5 ms x 64 streams, measured in
benchmarks/README.md). Here the loop calls back when the socket is
readable, the callback reads once and hands the payload to the consumer right there, and
the deadline is watched by one timer per stream that is re-armed only when it fires early.
The waiting greenlet is woken once, when the body ends. Where this cannot work (TLS, no
gevent), the greenlet reads as before (``Response.iter_body``), with the same results.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from gevent import get_hub
from gevent.hub import Waiter

from tpot_locust.wire.http_client import ReadTimeout, Response

# The event-loop reader is used wherever it can be; False reads in the greenlet (kept for
# side-by-side measurements, see benchmarks/common.py).
ENABLED = True
_READ = 1  # libev/libuv: watch for readability

Consume = Callable[[int, bytes], None]


def read_body(response: Response, consume: Consume) -> None:
    """Hand every payload of the body to ``consume(arrival_ns, payload)``, then return.

    Ends, raises and leaves ``response`` (``complete``, ``reset``) exactly as iterating
    ``response.iter_body()`` would; what ``consume`` raises ends the body read and is
    raised here. ``response.deadline_ns`` may be moved by ``consume``.
    """
    fileno = response.connection.loop_fileno() if ENABLED else None
    if fileno is None:
        for stamp, payload in response.iter_body():
            consume(stamp, payload)
        return
    payload = response.take(response.first_body)
    if payload:
        consume(response.head_stamp_ns, payload)
    if not response.settle():
        _LoopRead(response, consume, fileno).wait()


class _LoopRead:
    """The callbacks and state of one body read in the event loop."""

    __slots__ = ("_consume", "_failure", "_hub", "_last_read_ns", "_response", "_timer",
                 "_waiter", "_watcher")  # fmt: skip

    def __init__(self, response: Response, consume: Consume, fileno: int) -> None:
        self._response = response
        self._consume = consume
        self._hub = get_hub()
        self._waiter = Waiter(self._hub)
        self._watcher = self._hub.loop.io(fileno, _READ)
        self._timer = None
        self._failure: BaseException | None = None
        self._last_read_ns = time.perf_counter_ns()

    def wait(self) -> None:
        """Block this greenlet until the body has ended; raise why it ended early."""
        self._watcher.start(self._on_readable)
        self._arm(self._deadline_ns() - self._last_read_ns)
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
            read = response.connection.read_ready()
            if read is None:
                return
            data, stamp = read
            self._last_read_ns = stamp
            if not data:
                response.peer_closed(reset=False)
            else:
                payload = response.take(data)
                if payload:
                    self._consume(stamp, payload)
                if not response.settle():
                    return
        except ConnectionResetError:
            response.peer_closed(reset=True)
        except Exception as error:  # noqa: BLE001 - raised in the waiting greenlet instead
            self._failure = error
        self._end()

    def _on_deadline(self) -> None:
        left_ns = self._deadline_ns() - time.perf_counter_ns()
        if left_ns > 0:
            self._arm(left_ns)  # the deadline moved on since the timer was set
            return
        self._failure = ReadTimeout()
        self._end()

    def _deadline_ns(self) -> int:
        """``iter_body``'s limit: the response's deadline, and the connection's read timeout
        from the last read."""
        idle_ns = self._last_read_ns + int(self._response.connection.read_timeout * 1e9)
        deadline_ns = self._response.deadline_ns
        return idle_ns if deadline_ns is None else min(deadline_ns, idle_ns)

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
