"""Kernel transmit stamps: when each write's bytes left for the client, to the microsecond.

Why: the truth stamped a token just before ``transport.write``; a simulator held between
the two (two shared cores) moved the truth and not the arrival, so single tokens read
0.7-1.3 ms "late" in a planted-stall test that was in fact exact (benchmarks/README.md,
stamp_cost). Linux stamps a TCP segment as the device sends it (``SO_TIMESTAMPING``,
``TX_SOFTWARE``: on loopback 1.3-1.5 us before the client's receive stamp) and queues the
stamp on the socket's error queue, keyed (``OPT_ID``) by the stream offset of the
segment's last byte. A write sent at once is stamped inside its own ``send``: one
``recvmsg(MSG_ERRQUEUE)`` right after it finds the stamp (~4 us). A write TCP held back
(the client's window full) is merged into a later segment and sent when the window opens:
its truth stays when the server wrote it, since the wait is the client's doing, which the
truth must not hide (``send_truth``).
"""

from __future__ import annotations

import asyncio
import socket
import struct
import time

from ..common.clock import wall_minus_perf_ns

SO_TIMESTAMPING = 37  # Linux's value; Python does not export it
_TX_SOFTWARE, _SOFTWARE, _OPT_ID, _OPT_TSONLY = 1 << 1, 1 << 4, 1 << 7, 1 << 11
_OPT_RX_FILTER = 1 << 17  # newer Linux: reads are not stamped twice (older ones refuse it)
_FLAGS = _TX_SOFTWARE | _SOFTWARE | _OPT_ID | _OPT_TSONLY
_RECVERR = (11, 25)  # IP_RECVERR, IPV6_RECVERR: the control message with the stamp's key
_ORIGIN_STAMP = 4  # sock_extended_err.ee_origin of a stamp (SO_EE_ORIGIN_TIMESTAMPING)
_EXTENDED_ERROR = struct.Struct("IBBBBII")  # errno, origin, type, code, pad, info, data
_TIMESPEC = struct.Struct("@qq")

_KEY = struct.Struct("I")  # sock_extended_err.ee_data, 12 bytes in: the stamp's key
_ANCILLARY_BYTES = 256  # SCM_TIMESTAMPING (3 timespecs) and IP_RECVERR (error and address)
# How far outside its write call a stamp may fall and still be that write's: the two clocks
# are compared through an offset read at the response's start (~0.1 us of jitter).
SLACK_NS = 20_000
_KEY_MASK = 0xFFFFFFFF  # a stamp's key is the offset modulo 2**32


class SendStamps:
    """One connection's transmit stamps: ``wrote`` after every other write to it (the
    connection's ``write`` calls it); ``begin``, ``send`` (a token write and its stamp, in
    one call: the hot path) and ``settle`` for a response's token writes (``sent``: the
    same rule for a write made elsewhere)."""

    __slots__ = ("_held", "_sock", "_wall_minus_perf", "_walls", "kernel_events", "written")

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock  # (a duplicate of) the connection's socket, non-blocking
        self.written = 0  # bytes written to the connection since stamps were enabled
        self._walls: dict[int, int] = {}  # by the offset of a segment's last byte (32 bits)
        self._wall_minus_perf = wall_minus_perf_ns()
        # A response's writes with no stamp from within their call yet: (first event,
        # events, last byte's offset, perf ns before and after the call)
        self._held: list[tuple[int, int, int, int, int]] = []
        self.kernel_events = 0  # the response's events stamped by the kernel

    @classmethod
    def enable(cls, sock: socket.socket) -> SendStamps | None:
        """Stamps for a connection nothing was written to yet; None where the kernel
        refuses them (then the truth keeps the loop's stamps)."""
        if sock.family not in (socket.AF_INET, socket.AF_INET6):
            return None
        for flags in (_FLAGS | _OPT_RX_FILTER, _FLAGS):  # RX_FILTER: reads keep one stamp
            try:
                sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPING, flags)
                return cls(sock)
            except OSError:
                continue
        return None

    def wrote(self, size: int) -> int:
        """``size`` bytes were handed to the transport: their last byte's offset; the
        stamp a send at once left is taken in (one read: the rest come with ``collect``)."""
        self.written += size
        self._read_one()
        return self.written - 1

    def send(
        self, transport: asyncio.Transport | None, data: bytes, first: int, events: int
    ) -> int:
        """Write one token write (``events`` token events from the response's ``first``) and
        return when it left (perf ns), as ``wrote`` then ``sent`` would: the hot path, in one
        call. With nothing queued in ``transport`` the bytes go straight to the socket
        (asyncio's ``write`` would do the same ``send``, ~0.5 us of Python later); the rest
        of a partial send, or a send that fails, goes through the transport, which then
        keeps order and reports the error as before."""
        before = time.perf_counter_ns()
        if transport is not None:
            if transport.get_write_buffer_size() or transport.is_closing():
                transport.write(data)
            else:
                try:
                    sent = self._sock.send(data)
                except OSError:  # would block; reset, broken pipe: the transport's send reports it
                    sent = 0
                if sent < len(data):
                    transport.write(data[sent:])
            self.written += len(data)
            self._read_one()
        after = time.perf_counter_ns()
        last = self.written - 1
        wall = self._walls.pop(last & _KEY_MASK, None)
        if wall is not None:
            perf = wall - self._wall_minus_perf
            if before - SLACK_NS <= perf <= after + SLACK_NS:  # as ``send_truth``
                self.kernel_events += events
                return perf if perf > before else before
        self._held.append((first, events, last, before, after))
        return before

    def collect(self) -> None:
        """Take in every stamp waiting (the connection's reader calls it: a stamp waiting
        makes the socket report an error to the event loop until it is read)."""
        while self._read_one():
            pass

    def stamp_at(self, last: int) -> int | None:
        """The wall stamp of the segment whose last byte is at ``last`` (None: no segment
        ended there, or not yet sent), taken out."""
        return self._walls.pop(last & _KEY_MASK, None)

    def begin(self) -> None:
        """A response starts (the one before ended: nothing it wrote is asked for again);
        its own clock offset, so that the wall clock's drift never reaches a stamp."""
        self._walls.clear()
        self._held.clear()
        self.kernel_events = 0
        self._wall_minus_perf = wall_minus_perf_ns()

    def sent(self, before: int, first: int, events: int) -> int:
        """The token write just made (``events`` token events from the response's
        ``first``), begun at perf ns ``before``: when it left (perf ns), the kernel's stamp
        where one came within the call, else ``before`` (``settle`` tries it again)."""
        after = time.perf_counter_ns()
        last = self.written - 1
        perf = send_truth(before, after, self.stamp_at(last), self._wall_minus_perf)
        if perf is None:
            self._held.append((first, events, last, before, after))
            return before
        self.kernel_events += events
        return perf

    def settle(self, send_ns: list[int], offset_ns: int) -> int:
        """The response ended: its held writes' stamps that came since, each within its
        call, replace theirs in ``send_ns`` (``perf + offset_ns``); the events the kernel
        stamped in all."""
        if self._held:
            self.collect()
            for first, events, last, before, after in self._held:
                perf = send_truth(before, after, self.stamp_at(last), self._wall_minus_perf)
                if perf is not None:
                    send_ns[first : first + events] = [perf + offset_ns] * events
                    self.kernel_events += events
            self._held.clear()
        return self.kernel_events

    def _read_one(self) -> bool:
        try:
            _, ancillary, _, _ = self._sock.recvmsg(1, _ANCILLARY_BYTES, socket.MSG_ERRQUEUE)
        except OSError:  # BlockingIOError: none waiting
            return False
        # Nearly always the stamp, then its key; on the simulator's sockets, whose reads
        # are stamped too (SO_TIMESTAMPNS), after that stamp's own message: taken apart at
        # once (~0.3-0.6 us less than the loop below)
        if 2 <= len(ancillary) <= 3:
            (_, kind, stamp), (_, error_kind, error) = ancillary[-2:]
            if (
                kind == SO_TIMESTAMPING
                and error_kind in _RECVERR
                and len(stamp) >= 16
                and len(error) >= 16
                and error[4] == _ORIGIN_STAMP
            ):
                seconds, nanoseconds = _TIMESPEC.unpack_from(stamp)
                key = _KEY.unpack_from(error, 12)[0]
                self._walls.setdefault(key, seconds * 1_000_000_000 + nanoseconds)
                return True
        wall = key = None
        for level, kind, data in ancillary:
            if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPING and len(data) >= 16:
                seconds, nanoseconds = _TIMESPEC.unpack_from(data)
                wall = seconds * 1_000_000_000 + nanoseconds
            elif kind in _RECVERR and len(data) >= _EXTENDED_ERROR.size:
                error_fields = _EXTENDED_ERROR.unpack_from(data)
                if error_fields[1] == _ORIGIN_STAMP:
                    key = error_fields[6]
        if wall and key is not None:
            self._walls.setdefault(key, wall)  # a segment sent again keeps its first stamp
        return True


def send_truth(before: int, after: int, wall: int | None, wall_minus_perf_ns: int) -> int | None:
    """A write's truth (perf ns) from its segment's wall stamp, given perf ns ``before``
    and ``after`` the write call: None where it has none, or where the stamp fell outside
    the call (TCP held the bytes back: the truth keeps the write's own time, the loop's
    stamp before it)."""
    if wall is None:
        return None
    perf = wall - wall_minus_perf_ns
    if before - SLACK_NS <= perf <= after + SLACK_NS:
        return max(perf, before)
    return None
