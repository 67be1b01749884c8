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

A read of several whole plain token events is taken in one pass (``plain_runs``): at 256
streams x 2 ms, where reads hold several events, one core read 88k events/s instead of 62k
(benchmarks/README.md, stamp_cost).

Where every segment is stamped by the tap (the ``segment`` clock), a read may come late
without moving a stamp, so bodies are read in batches (``TPOT_LOCUST_READ_BATCH_MS``, 40 by
default; 0: each socket read as soon as it is ready): after a body's first read (its first
token noticed as it comes), one timer every that many ms reads once each body's socket the
tap saw data come to (again while a read fills its buffer; a quiet one every
``_QUIET_READ_S``), several events a read: no wake-up and no callback per event (CPU per
token event at 64 and 256 streams x 2 ms 0.8x the raw floor's with 40 ms batches, ~1.05x
with 20 ms, against 1.2-2x
read at once: benchmarks/README.md, stamp_cost). A body's end is heard by the end watch
(``end_watch``: a packet socket that hears only segments that end a body) and read at once,
so a closed-loop user sends its next request as early as reading at once lets it; a body
whose end cannot be heard (TLS, a Content-Length) is read at once. A batch works in slices
of ~1 ms with the loop free between them (its timers, the lag probe), so a batch is not a
client stall. While its body is read in batches a socket asks the kernel to acknowledge each
segment as it arrives (``ack_on_arrival``), not when it is read: else a server whose
unacknowledged segments fill its congestion window holds the next ones back until a read's
acknowledgement comes (40 ms batches, 8 streams of ~2 ms gaps: 5 % of tokens held 1-15 ms,
each one seen late by the truth check); and such a connection offers Ethernet's segment
size (``stamped_socket.ACK_MSS``), so one large event cannot raise the kernel's
receive-MSS estimate, by which it counts "unacknowledged enough", to kilobytes (docs/metrics.md,
"What the client does to the server's TCP"). A batched read's read delay is how late its batch
began; a read after the end was heard, how long after the hearing.
"""

from __future__ import annotations

from typing import Any

from gevent import get_hub
from gevent.hub import Waiter

from tpot_locust.common import env_vars
from tpot_locust.common.clock import stamp_ns
from tpot_locust.common.process_wide import ProcessWide
from tpot_locust.wire.end_watch import EndWatch
from tpot_locust.wire.http_client import ReadTimeout
from tpot_locust.wire.http_response import Consume, Response
from tpot_locust.wire.plain_runs import PlainRuns
from tpot_locust.wire.segment_stamps import process_tap
from tpot_locust.wire.stamped_socket import Batch, Run

# The event-loop reader is used wherever it can be; False reads in the greenlet (kept for
# side-by-side measurements, see benchmarks/common.py).
ENABLED = True
_READ = 1  # libev/libuv: watch for readability
# Reads of one socket in a batch while each fills its buffer (64 KiB): a 4 MiB event in 4
# batches, where one read a batch took 64 (0.64 s, an idle timeout in the fault tests)
_FULL_READS_PER_TICK = 16
# A batch reads a socket the tap saw no data come to at least this often: a close or a
# reset is found by reading (a body's end is noticed that much later at most)
_QUIET_READ_S = 0.1
_QUIET_READ_NS = int(_QUIET_READ_S * 1e9)
# A batch holds the loop at most about this long at a time (the lag probe's stall line is
# 2 ms), and files at most this many tap copies a slice (~1-3 us each)
_SLICE_S = 0.001
_SLICE_NS = int(_SLICE_S * 1e9)
_SLICE_COPIES = 384
DEFAULT_READ_BATCH_MS = 40.0
MAX_READ_BATCH_MS = 1000.0


def read_batch_s() -> float:
    """The batch period of this process's segment-clock body reads, in seconds (0: none);
    a value of ``TPOT_LOCUST_READ_BATCH_MS`` that is not a number from 0 to 1000 is an
    error, named."""
    text = env_vars.text(env_vars.READ_BATCH_MS).strip()
    if not text:
        return DEFAULT_READ_BATCH_MS / 1000
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 <= value <= MAX_READ_BATCH_MS:  # False for NaN too
        raise ValueError(
            f"{env_vars.READ_BATCH_MS}={text[:20]!r}: not a number of ms from 0 to "
            f"{MAX_READ_BATCH_MS:g}"
        )
    return value / 1000


def read_body(response: Response, consume: Consume, runs: PlainRuns | None = None) -> bool:
    """Hand every payload of the body to ``consume(arrival_ns, payload)``, then return
    whether it was read in batches (from its first read on, until its end was heard);
    reads that are runs of plain token events go to ``runs`` whole.

    Ends, raises and leaves ``response`` (``complete``, ``reset``) exactly as
    ``response.read_into`` would; what ``consume`` (or ``runs``) raises ends the body read
    and is raised here. ``consume`` may move ``response.deadline``.
    """
    fileno = response.connection.loop_fileno() if ENABLED else None
    if fileno is None:
        response.read_into(consume)
        return False
    batcher = _batcher() if _batchable(response) else None
    if response.begin(consume, None if runs is None else runs.take_pieces):
        return False
    read = _LoopRead(response, consume, fileno, runs, batcher)
    read.wait()
    return read.was_batched


def _batchable(response: Response) -> bool:
    """Whether the body may be read in batches: every segment is stamped by the tap (a late
    read moves no stamp) and its end can be heard (``end_watch``: plain TCP, a last chunk
    or a close; not a TLS record, not a byte count)."""
    connection = response.connection
    return (
        connection.stamps_each_segment
        and connection.segment_key is not None
        and response.end_is_marked
    )


class _LoopRead:
    """The callbacks and state of one body read in the event loop: at once until its first
    read, then (with a batcher) in batches until the end watch hears its end, then at once."""

    __slots__ = (
        "_batched",
        "_batcher",
        "_consume",
        "_ended",
        "_failure",
        "_fileno",
        "_heard_ns",
        "_hub",
        "_read_at_ns",
        "_response",
        "_runs",
        "_timer",
        "_waiter",
        "_watcher",
        "key",
        "was_batched",
    )

    def __init__(
        self,
        response: Response,
        consume: Consume,
        fileno: int,
        runs: PlainRuns | None = None,
        batcher: _Batcher | None = None,
    ) -> None:
        self._response = response
        self._consume = consume
        self._runs = runs
        self._hub = get_hub()
        self._waiter = Waiter(self._hub)
        self._fileno = fileno
        self._batcher = batcher  # None once reads are at once to the end
        self._watcher: Any = self._hub.loop.io(fileno, _READ)
        self._timer: Any | None = None  # gevent's loop timer, once armed
        self._failure: BaseException | None = None
        self._read_at_ns = 0  # when a batch last read the socket
        self._batched = False  # read in batches now
        self._ended = False
        self._heard_ns = 0  # when the end watch heard the end
        self.was_batched = False  # read in batches at some time
        self.key = response.connection.segment_key  # the end watch's for this connection

    def wait(self) -> None:
        """Block this greenlet until the body has ended; raise why it ended early."""
        self._watcher.start(self._on_readable)  # the first token noticed as it comes
        self._arm(self._response.deadline.at_ns - stamp_ns())
        try:
            self._waiter.get()
        finally:
            if not self._ended and self._response.connection.stamps_each_segment:
                self._read_what_came()
            self._stop()
            if not self._response.complete and self._failure is None:
                # cut off (the user was stopped): the rest of the body is never read
                self._response.connection.close()
        if self._failure is not None:
            raise self._failure

    def _on_readable(self, batch: Batch | None = None) -> bool:
        """Read once, hand on what came; whether the read filled its buffer and the body
        goes on (more may wait: a batch reads again). ``batch``: a batched read's (when
        it was due, when it began: its read delay)."""
        response = self._response
        try:
            split = self._runs.splitter() if self._runs is not None else None
            if split is None:
                pieces = response.connection.read_ready(batch)
            else:
                got = response.connection.read_ready_run(split, batch)
                if type(got) is Run:
                    self._runs.take(got.found, got.stamps)  # type: ignore[union-attr]
                    got = got.rest
                pieces = got  # type: ignore[assignment]
            if not pieces:
                return pieces is not None and response.connection.read_was_full
            for data, stamp in pieces:
                if response.absorb(data, stamp, self._consume):
                    break
            else:
                if self._batcher is not None and not self._batched:
                    self._to_batches()
                return response.connection.read_was_full
        except ConnectionResetError:
            response.peer_closed(reset=True)
        except Exception as error:  # noqa: BLE001 - raised in the waiting greenlet instead
            self._failure = error
        self._end()
        return False

    def _read_what_came(self) -> None:
        """The body is cut (its user stopped) while its data may wait for a batch: what
        came counts, as reading at once would have read it (its stamps are the tap's, so
        gaps that arrived inside the run's window are measured, every one)."""
        now_ns = stamp_ns()
        for _ in range(_FULL_READS_PER_TICK):
            if self._ended or not self._on_readable((now_ns, now_ns)):
                break

    def _to_batches(self) -> None:
        """After the first read: the rest is read by the batcher, its end heard."""
        self._watcher.stop()
        self._response.connection.ack_on_arrival(True)
        self._batched = self.was_batched = True
        self._batcher.add(self._fileno, self)  # type: ignore[union-attr]

    def to_once(self) -> None:
        """The end watch heard this body's end (or what looked like it): read at once from
        here to the end; when TCP has queued the data, the socket is readable."""
        if not self._batched:
            return
        self._batched = False
        self._batcher.remove(self._fileno)  # type: ignore[union-attr]
        self._batcher = None
        self._response.connection.ack_on_arrival(False)
        self._heard_ns = stamp_ns()
        self._watcher.start(self._read_to_end)

    def _read_to_end(self) -> None:
        """A read after the end was heard: what came before waited for its batch by design,
        so its read delay runs from the hearing (``_read_delay``)."""
        self._on_readable((self._heard_ns, stamp_ns()))

    def batch_read(self, batch: Batch) -> bool:
        """A batch's read (``_on_readable``), where the tap saw data come since the last
        one, or ``_QUIET_READ_S`` passed (a close or a reset carries no data: it is found
        by reading)."""
        began_ns = batch[1]
        if not self._response.connection.data_waiting() and (
            began_ns - self._read_at_ns < _QUIET_READ_NS
        ):
            return False
        self._read_at_ns = began_ns
        return self._on_readable(batch)

    def _on_deadline(self) -> None:
        if self._batched:  # what waits unread counts: the deadline is the stamps', not ours
            now_ns = stamp_ns()
            self._on_readable((now_ns, now_ns))
            if self._ended:
                return
        left_ns = self._response.deadline.at_ns - stamp_ns()
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
        self._ended = True
        self._stop()
        self._waiter.switch(None)

    def _stop(self) -> None:
        if self._batched:
            self._batched = False
            self._batcher.remove(self._fileno)  # type: ignore[union-attr]
            self._response.connection.ack_on_arrival(False)
        self._watcher.close()
        if self._timer is not None:
            self._timer.close()


class _Batcher:
    """This process's batched body reads: every period, the tap's copies filed, then one
    read of each body's socket the tap saw data come to (and of each quiet one every
    ``_QUIET_READ_S``); arriving data wakes nothing. A batch's work is done in slices of at
    most ``_SLICE_S``, the loop free in between (its timers, other reads, the lag probe):
    a batch is not a client stall. (The kernel cannot say which are readable:
    ``ack_on_arrival``'s low-water mark makes a socket readable to ``epoll`` only once that
    much waits; a read of an empty socket costs a system call, ~1.5 us, which a thousand
    streams waiting for their first token would pay a hundred times a second.)"""

    def __init__(self, period_s: float, ends: EndWatch) -> None:
        self._reads: dict[int, _LoopRead] = {}
        self._ends = ends
        self._period_ns = int(period_s * 1e9)
        self._timer: Any | None = None  # gevent's loop timer, while a body is read
        self._last_tick_ns = 0
        self._batch: Batch = (0, 0)  # the batch in progress: when it was due, when it began
        self._draining = False  # its tap copies are not all filed yet
        self._queue: list[int] = []  # the sockets it has still to look at
        self._slice: Any | None = None  # gevent's loop timer for its next slice

    @property
    def period_s(self) -> float:
        return self._period_ns / 1e9

    def add(self, fileno: int, read: _LoopRead) -> None:
        self._reads[fileno] = read
        if read.key is not None:
            self._ends.expect(read.key, read.to_once)
        if self._timer is None:
            period_s = self._period_ns / 1e9
            self._timer = get_hub().loop.timer(period_s, period_s)
            self._timer.start(self._tick)
            self._last_tick_ns = stamp_ns()

    def remove(self, fileno: int) -> None:
        read = self._reads.pop(fileno, None)
        if read is not None and read.key is not None:
            self._ends.cancel(read.key)
        if not self._reads and self._timer is not None:
            self._timer.close()
            self._timer = None
            self._queue.clear()
            self._draining = False
            if self._slice is not None:
                self._slice.close()
                self._slice = None

    def _tick(self) -> None:
        began_ns = stamp_ns()
        self._batch = (self._last_tick_ns + self._period_ns, began_ns)  # late: the loop was busy
        self._last_tick_ns = began_ns
        self._draining = process_tap() is not None  # (batches are read on the segment clock)
        self._queue = list(self._reads)
        self._queue.reverse()  # taken from the end: the order they were added in
        if self._slice is None:
            self._next_slice()

    def _next_slice(self) -> None:
        """One slice of the batch in progress; the next one after the loop has run again."""
        self._slice = None
        until_ns = stamp_ns() + _SLICE_NS
        if self._draining:
            tap = process_tap()
            if tap is not None and tap.drain(limit=_SLICE_COPIES):
                self._go_on()
                return
            self._draining = False
        reads, queue, batch = self._reads, self._queue, self._batch
        while queue:
            fileno = queue.pop()
            for _ in range(_FULL_READS_PER_TICK):
                # looked up each time: a body that ended switched to its user, who may
                # have begun the next on the same socket
                read = reads.get(fileno)
                if read is None or not read.batch_read(batch):
                    break
            if queue and stamp_ns() >= until_ns:
                self._go_on()
                return

    def _go_on(self) -> None:
        self._slice = get_hub().loop.timer(0.0)
        self._slice.start(self._next_slice)


def _made_batcher(period_s: float | None) -> _Batcher | None:
    period_s = read_batch_s() if period_s is None else period_s
    ends = EndWatch.open() if period_s > 0 else None
    return _Batcher(period_s, ends) if ends is not None else None


# One batcher per process: one timer in the event loop reads every batched body.
_BATCHER: ProcessWide[_Batcher | None] = ProcessWide(lambda: _made_batcher(None))


def use_read_batch(period_s: float | None) -> None:
    """Batch this process's later body reads every ``period_s`` (0: read at once; None:
    as ``TPOT_LOCUST_READ_BATCH_MS`` says), e.g. to compare them side by side. Reads in
    progress keep their way. Where no end watch can be opened, reads are at once."""
    _BATCHER.replace(_made_batcher(period_s))


def read_batch_period_s() -> float:
    """The period this process reads bodies in batches with (0: at once), as the run says."""
    batcher = _batcher()
    return 0.0 if batcher is None else batcher.period_s


def _batcher() -> _Batcher | None:
    """This process's batcher; None where reads are not batched (a period of 0)."""
    return _BATCHER.get()
