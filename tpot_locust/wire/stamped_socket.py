"""A connected socket whose bytes come in pieces, each with the time it reached this host.

Why its own room: what the HTTP client reads must carry arrival times no later read can
disturb, over plain TCP and TLS alike. Each read is stamped by the kernel
(``kernel_stamps``) and, where this process has a segment tap (``segment_stamps``), cut
into the segments it was sent in, each with its own stamp; under TLS the ciphertext is
read from the socket here and decrypted through ``ssl.SSLObject`` (a ``MemoryBIO`` pair),
so that https is stamped as http is: plaintext is handed on with the stamp of the segment
that completed its TLS record. ``HTTPConnection`` frames requests and responses over it.
"""

from __future__ import annotations

import socket
import ssl
from collections import deque
from collections.abc import Callable
from typing import Any

from tpot_locust.common.clock import (
    KERNEL_CLOCK,
    SEGMENT_CLOCK,
    USER_CLOCK,
    stamp_ns,
    wall_drift_ns,
)
from tpot_locust.common.errors import CONNECTION_ERROR, StreamError
from tpot_locust.common.kernel_stamps import (
    ANCILLARY_BYTES,
    MAX_KERNEL_AGE_NS,
    enable_kernel_stamps,
    kernel_wall_ns,
)
from tpot_locust.common.timings import int_array
from tpot_locust.wire.segment_stamps import SegmentTap, SegmentTrack, process_tap

RECV_BYTES = 65536
# ``ack_on_arrival``'s receive low-water mark: Linux acknowledges data as it arrives while
# less than this waits unread. 64 KiB holds seconds of a token stream, and is at most half
# the default receive buffer (tcp_rmem's 128 KiB), so setting it changes neither the buffer
# nor the window (a larger mark raises both).
_ACK_UNREAD_BYTES = 65536
# The segment size a connection read in batches offers its server, before it connects
# (``ack_on_arrival``): Ethernet's (1500-byte MTU, timestamps on), which any real path
# already has. Linux acknowledges on arrival once more than one receive-MSS is unacknowledged,
# and its estimate grows to the largest segment seen: on loopback (64 KiB MTU) one large
# event made it ~5 KB and the server's window filled between acknowledgements. TCP's 536
# would shrink the bytes a congestion window holds, which across a 20 ms round trip held a
# server more than reading at once does (docs/metrics.md, "What the client does to the
# server's TCP").
ACK_MSS = 1448
# The wall clock's offset from ours is read once a request (~0.1 us of jitter): a departure
# this much before the stamp taken before the send is that, not a stale copy.
_CLOCK_SLACK_NS = 20_000
Piece = tuple[bytes, int]  # (bytes, arrival on the stamp clock); b"": the peer closed
# A batched read's batch (``loop_reads``): when it was due and when it began (the stamp clock)
Batch = tuple[int, int]
# Finds the whole events a read begins with: what it found (handed on), the offset of
# each event's last byte in the read (ascending) and the bytes they take; else None.
Split = Callable[[bytes], "tuple[Any, list[int], int] | None"]


class Run:
    """A read whose beginning was taken whole: what ``Split`` found there, the arrival
    of the read's first byte and of each event (the stamp clock: each the stamp a
    ``cut`` piece would carry), and the rest of the read in pieces."""

    __slots__ = ("found", "rest", "stamps")

    def __init__(self, found: Any, stamps: list[int], rest: list[Piece]) -> None:
        self.found = found
        self.stamps = stamps
        self.rest = rest


class StampedSocket:
    """One connection's socket (TLS decrypted here, if any) and its arrival stamps."""

    def __init__(self, sock: socket.socket, clock: str, address: tuple[Any, ...]) -> None:
        self.sock = sock
        self.tls: ssl.SSLObject | None = None
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._tap: SegmentTap | None = None
        self._track: SegmentTrack | None = None
        self._address = address
        self._offset = 0  # bytes read from the socket since it connected
        self._sent = 0  # bytes written to it since it connected
        self._request_at = 0  # where the last request sent began among them
        self.departed = False  # the last request's departure came from the tap
        self.clock = clock if clock == USER_CLOCK or enable_kernel_stamps(sock) else USER_CLOCK
        if self.clock == SEGMENT_CLOCK:
            self._watch()
        self.pending: deque[Piece] = deque()  # pieces read, not yet handed on
        self._wall_drift_ns = 0
        self._last_stamp_ns = 0
        # How late each read came: our clock at the read minus its newest piece's stamp
        # (kernel stamps only). A new array for every request.
        self.read_delays_ns = int_array()
        self.unrecovered_reads = 0  # this request's reads a segment copy missed
        self.read_full = False  # the last read filled its buffer: more may be waiting

    def _watch(self) -> None:
        """Keep this connection's segment copies (the socket is bound, not yet connected)."""
        tap = process_tap()
        if tap is None or self.sock.family != socket.AF_INET:
            self.clock = KERNEL_CLOCK
            return
        self._tap = tap
        self._track = tap.watch(self.sock.getsockname()[1], *self._address[:2])

    @classmethod
    def connect(
        cls, family: int, address: tuple[object, ...], clock: str, timeout_s: float
    ) -> StampedSocket:
        """Connected within ``timeout_s``; raises ``TimeoutError`` or ``OSError``."""
        sock = socket.socket(family, socket.SOCK_STREAM)
        stamped = None
        try:
            sock.settimeout(timeout_s)
            if clock == SEGMENT_CLOCK:  # its body may be read in batches: ``ack_on_arrival``
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG, ACK_MSS)
            if clock == SEGMENT_CLOCK and family == socket.AF_INET:
                sock.bind(("0.0.0.0", 0))  # the local port, for the tap, before the SYN
            stamped = cls(sock, clock, address)
            sock.connect(address)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except BaseException:
            if stamped is not None:
                stamped.close()  # the socket, and the tap's watch of it
            else:
                sock.close()
            raise
        return stamped

    def start_tls(self, context: ssl.SSLContext, host: str, timeout_s: float) -> None:
        """The TLS handshake, through memory buffers; raises ``OSError`` (``SSLError``)."""
        self.tls = context.wrap_bio(self._incoming, self._outgoing, server_hostname=host)
        self.sock.settimeout(timeout_s)
        while True:
            try:
                self.tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                self._flush_tls()
                data = self.sock.recv(RECV_BYTES)
                if not data:
                    raise ssl.SSLEOFError("the server closed during the TLS handshake") from None
                self._offset += len(data)
                self._incoming.write(data)
        self._flush_tls()

    def begin_request(self) -> None:
        """A request is about to be sent: its own delays and clock offset."""
        # per request, so that a step of the wall clock spoils at most one request
        self._wall_drift_ns = wall_drift_ns()
        self.read_delays_ns = int_array()
        self.unrecovered_reads = 0
        self.departed = False

    def sent_at(self, send_ns: int) -> None:
        self._last_stamp_ns = send_ns  # no piece of its answer can be stamped earlier

    def send(self, data: bytes, timeout_s: float) -> None:
        self.sock.settimeout(timeout_s)
        self._request_at = self._sent
        if self.tls is None:
            self.sock.sendall(data)
            self._sent += len(data)
            return
        self.tls.write(data)
        self._flush_tls()

    def _flush_tls(self) -> None:
        if self._outgoing.pending:
            data = self._outgoing.read()
            self.sock.sendall(data)
            self._sent += len(data)

    def departure_ns(self, send_ns: int) -> int:
        """When the request last sent left this host (the stamp clock): the tap's stamp
        of the segment its first byte began, where there is one after ``send_ns`` (taken
        just before the send); else ``send_ns``. Asked once the answer's head came, so the
        copy of a segment sent on this host is in the tap by then (it was made as the
        segment left, inside the send)."""
        track = self._track
        self.departed = False
        if track is None:
            return send_ns
        self._tap.drain()  # type: ignore[union-attr]
        wall_ns = track.departure(self._request_at)
        if wall_ns is None:
            return send_ns
        left_ns = wall_ns - self._wall_drift_ns
        if send_ns - _CLOCK_SLACK_NS <= left_ns <= stamp_ns():
            self.departed = True
            return max(left_ns, send_ns)
        return send_ns

    def recv_piece(self, timeout_s: float) -> Piece:
        """The next piece, waiting at most ``timeout_s`` (> 0) for the socket; raises
        ``TimeoutError``, ``ConnectionResetError`` or ``StreamError``."""
        while not self.pending:
            self.sock.settimeout(timeout_s)
            self.pending.extend(self._read(self.sock))
        return self.pending.popleft()

    def ack_on_arrival(self, on: bool) -> None:
        """``on``: the kernel acknowledges each segment as it arrives, not when it is read
        (while this socket is read in batches); else as it does by default.

        Linux acknowledges data as it arrives (once more than a segment's worth is
        unacknowledged) only while the reader keeps up, or while less than the socket's
        low-water mark (``SO_RCVLOWAT``, default 1 byte) waits unread
        (``__tcp_ack_snd_check``); else at the next read or the delayed-ACK timer (40 ms on
        loopback). A server whose congestion window (18 segments here) is full of segments
        not yet acknowledged sends nothing more: the next tokens wait, merged into one
        segment, and arrive late because the client read late. The mark also keeps
        ``epoll`` from calling the socket readable before that much waits (``loop_reads``'
        batches read without asking)."""
        try:
            self.sock.setsockopt(
                socket.SOL_SOCKET, socket.SO_RCVLOWAT, _ACK_UNREAD_BYTES if on else 1
            )
        except OSError:
            pass  # closed already, or no such option: nothing to acknowledge

    @property
    def segment_key(self) -> int | None:
        """The tap's key for this connection (``segment_stamps.track_key``) where its bytes
        are plain TCP (an end of body can be heard: ``end_watch``); else None."""
        track = self._track
        return None if track is None or self.tls is not None else track.key

    def data_waiting(self) -> bool:
        """Whether the tap has filed a segment of this connection that was not read yet
        (as of its last drain); True where there is no tap to ask."""
        track = self._track
        return track is None or track.has_data_after(self._offset)

    def loop_fileno(self) -> int | None:
        """The descriptor when ``read_ready`` may be used (gevent's non-blocking socket
        underneath), else None."""
        raw = getattr(self.sock, "_sock", None)  # gevent's socket keeps the OS one here
        if raw is None or raw.gettimeout() != 0.0:
            return None
        return self.sock.fileno()

    def read_ready(self, batch: Batch | None = None) -> list[Piece] | None:
        """The pieces of one read of a socket the event loop said is readable (maybe none:
        half a TLS record); None when nothing was there after all. ``batch``: that of a
        batched read (``loop_reads``), whose read delay is how late its batch began: data
        waits for its batch by design."""
        try:
            data, wall_ns, now_ns = self._receive(self.sock._sock)  # type: ignore[attr-defined]
        except BlockingIOError:
            return None
        return self._pieces(data, wall_ns, now_ns, batch)

    def read_ready_run(self, split: Split, batch: Batch | None = None) -> Run | list[Piece] | None:
        """``read_ready``, except that a read ``split`` finds whole events in (plain TCP)
        comes back as one ``Run``, not cut into pieces."""
        try:
            data, wall_ns, now_ns = self._receive(self.sock._sock)  # type: ignore[attr-defined]
        except BlockingIOError:
            return None
        if self.tls is None and data and (found := split(data)) is not None:
            found_in, lasts, used = found
            stamps = self._run_stamps(data, lasts, used, wall_ns, now_ns, batch)
            if stamps is not None:
                if used == len(data):
                    return Run(found_in, stamps, [])
                rest = data[used:]
                if self.clock == USER_CLOCK:
                    return Run(found_in, stamps, [(rest, now_ns)])
                return Run(found_in, stamps, self._stamped(rest, wall_ns, now_ns, first=False))
        return self._pieces(data, wall_ns, now_ns, batch)

    def _run_stamps(
        self,
        data: bytes,
        lasts: list[int],
        used: int,
        wall_ns: int | None,
        now_ns: int,
        batch: Batch | None,
    ) -> list[int] | None:
        """The stamps of a ``Run`` of the first ``used`` bytes of ``data``: each the one
        its byte's piece would have had."""
        if self.clock == USER_CLOCK:
            return [now_ns] * (len(lasts) + 1)
        track = self._track
        if track is None:
            stamps = [self._arrival_ns(wall_ns, now_ns)] * (len(lasts) + 1)
        else:
            stop = self._offset + len(data)
            if track.covered < stop:
                self._tap.drain(track, stop)  # type: ignore[union-attr]
            walls = track.stamps_at(self._offset, used, lasts)
            if walls is None:
                return None
            arrival = self._arrival_ns
            stamps = [arrival(wall, now_ns) for wall in walls]
        self._offset += used
        self.read_delays_ns.append(_read_delay(now_ns, stamps[0], batch))
        return stamps

    def close(self) -> None:
        if self._tap is not None:
            self._tap.forget(self._track)  # type: ignore[arg-type]
            self._tap = self._track = None
        self.pending.clear()
        self.sock.close()

    def _read(self, sock: socket.socket) -> list[Piece]:
        return self._pieces(*self._receive(sock))

    def _receive(self, sock: socket.socket) -> tuple[bytes, int | None, int]:
        """One read: its bytes, its kernel stamp (wall ns; None on the user clock or where
        the kernel gave none) and our clock when it returned."""
        try:
            if self.clock == USER_CLOCK:
                data, wall_ns = sock.recv(RECV_BYTES), None
            else:
                data, ancillary, _, _ = sock.recvmsg(RECV_BYTES, ANCILLARY_BYTES)
                wall_ns = kernel_wall_ns(ancillary)
            self.read_full = len(data) == RECV_BYTES
            return data, wall_ns, stamp_ns()
        except (TimeoutError, BlockingIOError):
            raise
        except ConnectionError:
            raise ConnectionResetError() from None
        except OSError as error:
            raise StreamError(CONNECTION_ERROR, f"read: {error.strerror or error}") from None

    def _pieces(
        self, data: bytes, wall_ns: int | None, now_ns: int, batch: Batch | None = None
    ) -> list[Piece]:
        """A read cut into pieces, each with its arrival (plaintext, under TLS)."""
        if self.clock == USER_CLOCK:
            pieces = [(data, now_ns)]
        else:
            pieces = self._stamped(data, wall_ns, now_ns, batch=batch)
        return pieces if self.tls is None else self._decrypt(pieces)

    def _stamped(
        self,
        data: bytes,
        wall_ns: int | None,
        now_ns: int,
        first: bool = True,
        batch: Batch | None = None,
    ) -> list[Piece]:
        """The read cut into its segments (where the tap has them), on our clock
        (``first``: the read's first bytes, whose wait is its read delay; ``batch``: a
        batched read's, ``_read_delay``)."""
        track = self._track
        if track is None or not data:
            cut: list[tuple[bytes, int | None]] = [(data, wall_ns)]
        else:
            if track.covered < self._offset + len(data):
                self._tap.drain(track, self._offset + len(data))  # type: ignore[union-attr]
            cut = track.cut(self._offset, data)
            if cut[-1][1] is None:
                self.unrecovered_reads += 1
                cut[-1] = (cut[-1][0], wall_ns)
        self._offset += len(data)
        pieces = [(piece, self._arrival_ns(stamp, now_ns)) for piece, stamp in cut]
        # How long the read's oldest data waited: on the segment clock its first segment's
        # stamp; on the kernel clock all it has is the newest data's (a lower bound).
        if first:
            self.read_delays_ns.append(_read_delay(now_ns, pieces[0][1], batch))
        return pieces

    def _arrival_ns(self, wall_ns: int | None, now_ns: int) -> int:
        """A kernel stamp on our clock; never later than now, never earlier than the
        previous one (so gaps stay non-negative across a clock step)."""
        stamp = now_ns
        if wall_ns is not None:
            kernel_ns = wall_ns - self._wall_drift_ns
            if now_ns - MAX_KERNEL_AGE_NS <= kernel_ns <= now_ns:
                stamp = kernel_ns
        if stamp < self._last_stamp_ns:
            stamp = self._last_stamp_ns
        self._last_stamp_ns = stamp
        return stamp

    def _decrypt(self, pieces: list[Piece]) -> list[Piece]:
        """Plaintext of each piece of ciphertext, with its stamp: a record is readable
        when its last byte came."""
        tls, plain = self.tls, []
        assert tls is not None  # ok: only called under TLS
        for data, stamp in pieces:
            closed = not data
            if data:
                self._incoming.write(data)
                chunks = []
                try:
                    while chunk := tls.read(RECV_BYTES):
                        chunks.append(chunk)
                    closed = True  # read returns b"" only at the end
                except ssl.SSLWantReadError:
                    pass
                except ssl.SSLZeroReturnError:  # the server's close_notify: the end
                    closed = True
                except ssl.SSLError as error:
                    raise StreamError(CONNECTION_ERROR, f"TLS: {error}") from None
                if chunks:
                    plain.append((b"".join(chunks), stamp))
            if closed:
                plain.append((b"", stamp))
                break
        self._flush_tls()  # a key update or ticket the read asked to answer
        return plain


def _read_delay(now_ns: int, first_ns: int, batch: Batch | None) -> int:
    """How long a read's oldest data waited for it: until the read, or for a batched read,
    from when its batch was due (data waits for it by design) to when the batch began
    (reads within a batch wait for those before them: that is the batch's work, not the
    client falling behind; a batch that took longer than its period makes the next late)."""
    if batch is None:
        return now_ns - first_ns
    due_ns, began_ns = batch
    return max(began_ns - max(first_ns, due_ns), 0)
