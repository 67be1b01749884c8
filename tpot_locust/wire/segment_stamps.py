"""Segment stamps: every TCP segment's own arrival, whether or not the client was reading.

Why: a read of a TCP socket carries the kernel stamp of the newest segment it returns, and
the kernel merges (coalesces) segments that wait in a socket into one buffer that keeps the
newest stamp. Measured here (Linux 6.18, loopback): ten events sent 2 ms apart and read after
a 60 ms stall all carried the last one's stamp, whether read whole or one event's bytes at a
time; so no way of reading the stream socket itself can tell them apart. A packet socket
(``AF_PACKET``) receives its own copy of every segment before TCP merges anything, each
stamped by the kernel as it arrived (the same stamp the stream socket's read would carry,
to within a few microseconds); matching those copies to the stream by TCP sequence number
gives every byte's arrival. ``SegmentTap`` is the one packet socket of a process, filtered
in the kernel to the servers' ports and cut to the headers (``tap_filter``; 32 MiB of ring
per process); ``SegmentTrack`` is one connection's segments, which cuts each read into
pieces, one per segment, each with its own stamp, and keeps when each segment we sent with
data left (a request's departure: where its TTFT starts, as the server's begins at its
arrival). Needs ``CAP_NET_RAW`` (root in a container has it);
without it, for IPv6 servers, and where ``TPOT_LOCUST_STAMPS=kernel`` turns it off, reads
keep the stream socket's stamp.
"""

from __future__ import annotations

import _socket  # never gevent's: the tap is read without waiting, from the event loop
import mmap
import socket
import struct
import sys
from array import array
from bisect import bisect_right

from tpot_locust.common import env_vars
from tpot_locust.common.clock import KERNEL_CLOCK, SEGMENT_CLOCK
from tpot_locust.common.kernel_stamps import ANCILLARY_BYTES, SO_TIMESTAMPNS, wanted_clock
from tpot_locust.common.process_wide import ProcessWide
from tpot_locust.wire.tap_filter import PACKET_OUTGOING, attach, tap_filter

# All protocols: such taps get each frame before IP does (one bound to IPv4 alone got its
# copy after TCP had queued the data on kernel 6.18: a read now and then found no copy yet)
ETH_P_ALL = 0x0003
SO_RCVBUFFORCE = 33
# Room for the copies that wait while the client cannot run: at ~1 KiB of kernel memory a
# copy, 64 MiB holds ~60,000 segments, a second of 256 streams at 4 ms gaps.
TAP_BUFFER_BYTES = 64 * 1024 * 1024
HEADER_BYTES = 120  # an IPv4 header (<= 60 bytes) and a TCP one (<= 60): the most a copy keeps
_SEQUENCE = 1 << 32
_NO_LIMIT = 1 << 62
_TCP_SYN, _TCP_ACK = 0x02, 0x10
_HEADS = struct.Struct("!HHII")  # source port, destination port, sequence, acknowledgement
_TIMESPEC = struct.Struct("@qq")  # the one control message: SO_TIMESTAMPNS's timespec


class SegmentTrack:
    """One connection's segments from the server, in stream order: where each ends (bytes
    since the connection opened) and when it arrived (wall ns); and when those we sent it
    left (``sent``, ``departure``)."""

    __slots__ = (
        "_ahead",
        "_base",
        "_departures",
        "_next_seq",
        "_sent_base",
        "covered",
        "ends",
        "key",
        "stamps",
        "unrecovered",
    )

    def __init__(self, key: int = 0) -> None:
        self.key = key  # our port, the server's port and its IPv4 address (``track_key``)
        self._next_seq: int | None = None  # the sequence number of byte ``covered``
        self.covered = 0  # bytes from the start that arrived, in order, without a hole
        self.ends = array("q")
        self.stamps = array("q")
        self._base = 0  # segments before this one were read already
        self._ahead: dict[int, tuple[int, int]] = {}  # start -> (end, stamp): past a hole
        self.unrecovered = 0  # bytes read that no segment copy covered (kept the read's stamp)
        self._sent_base: int | None = None  # the sequence number of the first byte we send
        self._departures: dict[int, int] = {}  # our bytes' offset -> when its segment left

    def synchronise(self, initial_seq: int) -> None:
        """The server's SYN-ACK: its first data byte is ``initial_seq + 1``."""
        if self._next_seq is None:
            self._next_seq = (initial_seq + 1) % _SEQUENCE

    def add(self, seq: int, length: int, stamp_wall_ns: int) -> None:
        """A segment copy: ``length`` payload bytes from sequence number ``seq``."""
        if seq == self._next_seq and not self._ahead:  # the next in order: nearly always
            end = self.covered + length
            stamps = self.stamps
            if stamps and stamp_wall_ns < stamps[-1]:
                stamp_wall_ns = stamps[-1]
            self._next_seq = (seq + length) & 0xFFFFFFFF
            self.covered = end
            self.ends.append(end)
            stamps.append(stamp_wall_ns)
            return
        if self._next_seq is None:  # the SYN-ACK was missed: the first data starts the stream
            self._next_seq = seq
        delta = (seq - self._next_seq + (_SEQUENCE >> 1)) % _SEQUENCE - (_SEQUENCE >> 1)
        start = self.covered + delta
        end = start + length
        if end <= self.covered:
            return  # a retransmission of what had arrived: the first arrival counts
        if start > self.covered:
            self._ahead.setdefault(start, (end, stamp_wall_ns))  # readable once the hole fills
            return
        self._append(end, stamp_wall_ns)
        self._release_ahead(stamp_wall_ns)  # a hole filled: what waited beyond is readable now

    def _append(self, end: int, stamp_wall_ns: int) -> None:
        if self.stamps and stamp_wall_ns < self.stamps[-1]:
            stamp_wall_ns = self.stamps[-1]  # a byte is readable no earlier than those before it
        self._next_seq = (self._next_seq + end - self.covered) % _SEQUENCE  # type: ignore[operator]
        self.covered = end
        self.ends.append(end)
        self.stamps.append(stamp_wall_ns)

    def has_data_after(self, offset: int) -> bool:
        """Whether a copy came of bytes past stream ``offset``: in order, or past a hole
        (a copy the ring lost leaves one that no later copy fills)."""
        return self.covered > offset or bool(self._ahead)

    def sent(self, flags: int, seq: int, length: int, stamp_wall_ns: int) -> None:
        """A copy of a segment we sent: our SYN gives our first sequence number; one with
        data, when the byte it begins with left (a retransmission is later: the first
        copy counts)."""
        if flags & _TCP_SYN:
            self._sent_base = (seq + 1) & 0xFFFFFFFF
        elif self._sent_base is not None and length > 0:
            self._departures.setdefault((seq - self._sent_base) & 0xFFFFFFFF, stamp_wall_ns)

    def departure(self, offset: int) -> int | None:
        """When the segment that began with our byte ``offset`` left (wall ns); None where
        no copy began there. The copies kept before go (each request asks once)."""
        stamp = self._departures.get(offset & 0xFFFFFFFF)
        self._departures.clear()
        return stamp

    def cut(self, offset: int, data: bytes) -> list[tuple[bytes, int | None]]:
        """``data`` (read at stream ``offset``) cut where segments ended, each piece with
        its segment's wall stamp; a last piece no copy covered has None."""
        ends, stamps = self.ends, self.stamps
        index = bisect_right(ends, offset, self._base)  # the first segment ending after it
        stop = offset + len(data)
        if index < len(ends) and ends[index] == stop:  # one segment, read whole: nearly always
            stamp = stamps[index]
            self._forget(index + 1)
            return [(data, stamp)]
        pieces: list[tuple[bytes, int | None]] = []
        at = offset
        while at < stop and index < len(ends):
            end, stamp = ends[index], stamps[index]
            if end > stop:
                end = stop  # the segment goes on in the next read
            else:
                index += 1
            pieces.append((data[at - offset : end - offset], stamp))
            at = end
        self._forget(index)
        if at < stop:
            self.unrecovered += stop - at
            pieces.append((data[at - offset :], None))
            self._skip_to(stop)
        return pieces

    def _skip_to(self, stop: int) -> None:
        """Bytes up to ``stop`` were read that no copy in order covered (the ring lost one,
        or it comes later: then it is taken for a repeat): the track goes on from there, with
        what waited past the hole, so that one lost copy does not leave the rest of the
        connection unstamped."""
        if stop <= self.covered or self._next_seq is None:
            return
        self._next_seq = (self._next_seq + stop - self.covered) % _SEQUENCE
        self.covered = stop
        self._release_ahead(None)

    def _release_ahead(self, readable_wall_ns: int | None) -> None:
        """The segments that waited past a hole, from the one that ``covered`` reaches now
        up to the next hole, in order; each readable at ``readable_wall_ns`` (when the copy
        that filled the hole came), or None: at its own stamp (no copy filled it)."""
        for start in sorted(self._ahead):
            if start > self.covered:
                break  # another hole
            end, own_wall_ns = self._ahead.pop(start)
            if end > self.covered:
                self._append(end, own_wall_ns if readable_wall_ns is None else readable_wall_ns)

    def stamps_at(self, offset: int, size: int, lasts: list[int]) -> list[int] | None:
        """For a read of ``size`` bytes at stream ``offset`` taken whole (not ``cut``): the
        wall stamps of the segments that hold its first byte and each byte at ``lasts``
        (offsets in the read, ascending); None where a copy is missing (then ``cut``
        keeps what it can)."""
        stop = offset + size
        if self.covered < stop:
            return None
        ends, stamps = self.ends, self.stamps
        index = bisect_right(ends, offset, self._base)  # the first segment ending after it
        found = [stamps[index]]
        for last in lasts:
            at = offset + last
            while ends[index] <= at:
                index += 1
            found.append(stamps[index])
        self._forget(index + 1 if ends[index] == stop else index)
        return found

    def _forget(self, base: int) -> None:
        """Segments before ``base`` were read; dropped now and then (4,096 at a time)."""
        if base > 4096:
            del self.ends[:base], self.stamps[:base]
            base = 0
        self._base = base


class SegmentTap:
    """This process's packet socket: copies of the segments servers send to it, stamped.

    The copies come through a ``TPACKET_V2`` ring the kernel writes into memory shared with
    us (no system call and no socket buffer per copy; V3's blocks reach us only when the
    kernel retires them, >= 1 ms later, too late for a read waiting on its copy); where the
    ring cannot be set up, or ``TPOT_SEGMENT_RING=0``, one ``recvmsg`` a copy.
    """

    def __init__(self, sock: _socket.socket, ring: mmap.mmap | None = None) -> None:
        self._sock = sock
        self._ring = ring
        self._frame = 0  # the ring's next frame to look at
        self._ports: set[int] = set()
        self._tracks: dict[int, SegmentTrack] = {}  # by ``track_key``
        self.dropped_reads = 0

    @classmethod
    def open(cls) -> SegmentTap | None:
        """The tap, or None where this process may not open one (no ``CAP_NET_RAW``)."""
        if not ANCILLARY_BYTES:
            return None
        sock = packet_socket()
        if sock is None:
            return None
        try:
            attach(sock, tap_filter([]))  # nothing until a server's port is watched
            sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
            try:
                sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, TAP_BUFFER_BYTES)
            except OSError:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, TAP_BUFFER_BYTES)
            sock.setblocking(False)
        except OSError:
            sock.close()
            return None
        tap = cls(sock, None if env_vars.text(env_vars.SEGMENT_RING) == "0" else _open_ring(sock))
        tap._flush()  # copies that came before the filter was attached
        return tap

    def watch(self, local_port: int, remote_ip: str, remote_port: int) -> SegmentTrack:
        """Start keeping the segments of a connection about to open (before its SYN)."""
        if remote_port not in self._ports:
            self._ports.add(remote_port)
            attach(self._sock, tap_filter(sorted(self._ports)))
        address = int.from_bytes(socket.inet_aton(remote_ip), "big")
        track = SegmentTrack(track_key(local_port, remote_port, address))
        self._tracks[track.key] = track
        return track

    def close(self) -> None:
        if self._ring is not None:
            self._ring.close()
            self._ring = None
        self._sock.close()

    def forget(self, track: SegmentTrack) -> None:
        """The connection closed: its copies are no longer kept."""
        if self._tracks.get(track.key) is track:
            del self._tracks[track.key]

    def drain(
        self, wanted: SegmentTrack | None = None, until: int = 0, limit: int = _NO_LIMIT
    ) -> bool:
        """File the copies waiting in the tap with their connections' tracks: all of them,
        or (``wanted``) until that track covers ``until`` bytes, which saves the read that
        finds the tap empty (a read of the stream found its copy waiting nearly always);
        at most ``limit`` of them. Whether it stopped at the limit (more may wait)."""
        if self._ring is not None:
            return self._drain_ring(wanted, until, limit)
        recvmsg, tracks, heads = self._sock.recvmsg, self._tracks, _HEADS.unpack_from
        stamp_of = _TIMESPEC.unpack_from
        while wanted is None or wanted.covered < until:
            if limit <= 0:
                return True
            limit -= 1
            try:
                packet, ancillary, _, link = recvmsg(HEADER_BYTES, ANCILLARY_BYTES)
            except BlockingIOError:
                return False
            except OSError:
                self.dropped_reads += 1
                return False
            header = (packet[0] & 15) * 4  # the filter kept IPv4 TCP only
            source_port, local_port, seq, _ = heads(packet, header)
            outgoing = link[2] == PACKET_OUTGOING  # (ifname, protocol, packet type, ...)
            if outgoing:
                source_port, local_port = local_port, source_port
            address = int.from_bytes(packet[16:20] if outgoing else packet[12:16], "big")
            track = tracks.get(track_key(local_port, source_port, address))
            if track is None or not ancillary:
                continue
            seconds, nanoseconds = stamp_of(ancillary[0][2])
            flags = packet[header + 13]
            length = ((packet[2] << 8) | packet[3]) - header - (packet[header + 12] >> 4) * 4
            if outgoing:
                track.sent(flags, seq, length, seconds * 1_000_000_000 + nanoseconds)
            elif flags & _TCP_SYN:
                if flags & _TCP_ACK:
                    track.synchronise(seq)
            elif length > 0:
                track.add(seq, length, seconds * 1_000_000_000 + nanoseconds)
        return False

    def _drain_ring(self, wanted: SegmentTrack | None, until: int, limit: int) -> bool:
        """``drain`` from the ring: each frame the kernel handed over (its status says so)
        is read in place and handed back. A copy of a plain IPv4 header (no options: all
        of ours) takes two ``unpack_from`` (2.7-3.3 us a frame on a fake ring, 3.2-3.8
        field by field); any other goes through ``_drain_one``. (Parsing many frames at
        once with numpy was tried: less CPU with batched reads, dropped when the quiet
        tail-truth run said ``client.busy`` by the old P99 rule: benchmarks/README.md,
        stamp_cost.)"""
        ring = self._ring
        assert ring is not None  # ok: only called with a ring
        tracks, frame_of, packet_of = self._tracks, _FRAME.unpack_from, _PLAIN_PACKET.unpack_from
        frame = self._frame
        try:
            while wanted is None or wanted.covered < until:
                if limit <= 0:
                    return True
                limit -= 1
                at = frame * _FRAME_BYTES
                status, _, snaplen, _, net, seconds, nanoseconds, direction = frame_of(ring, at)
                if not status & _TP_STATUS_USER:
                    return False
                version, total, address, to, source_port, local_port, seq, offset, flags = (
                    packet_of(ring, at + net)
                )
                if version != _PLAIN_IPV4 or snaplen < _PLAIN_HEADERS:
                    self._frame = frame
                    self._drain_one(ring)
                    frame = self._frame
                    continue
                if status & _TP_STATUS_LOSING:
                    self.dropped_reads += 1  # the ring was full: some copies were lost
                if direction == PACKET_OUTGOING:  # ours, to a server: the key's roles swap
                    track = tracks.get((source_port << 48) | (local_port << 32) | to)
                    if track is not None:
                        length = total - 20 - (offset >> 4) * 4
                        track.sent(flags, seq, length, seconds * 1_000_000_000 + nanoseconds)
                    ring[at : at + 4] = _KERNEL_OWNS
                    frame = frame + 1 if frame + 1 < _RING_FRAMES else 0
                    continue
                track = tracks.get((local_port << 48) | (source_port << 32) | address)
                if track is not None:  # (the key is ``track_key``'s)
                    if flags & _TCP_SYN:
                        if flags & _TCP_ACK:
                            track.synchronise(seq)
                    elif (length := total - 20 - (offset >> 4) * 4) > 0:
                        track.add(seq, length, seconds * 1_000_000_000 + nanoseconds)
                ring[at : at + 4] = _KERNEL_OWNS  # the frame is the kernel's again
                frame = frame + 1 if frame + 1 < _RING_FRAMES else 0
            return False
        finally:
            self._frame = frame

    def _drain_one(self, ring: mmap.mmap) -> bool:
        """The ring's next frame filed and handed back, whatever its IP header's length;
        False when it is not ready."""
        at = self._frame * _FRAME_BYTES
        status, _, snaplen, _, net, seconds, nanoseconds, direction = _FRAME.unpack_from(ring, at)
        if not status & _TP_STATUS_USER:
            return False
        if status & _TP_STATUS_LOSING:
            self.dropped_reads += 1  # the ring was full: some copies were lost
        packet = at + net
        header = (ring[packet] & 15) * 4  # the filter kept IPv4 TCP only
        if snaplen >= header + 20:
            source_port, local_port, seq, _ = _HEADS.unpack_from(ring, packet + header)
            outgoing = direction == PACKET_OUTGOING  # ours, to a server: the key's roles swap
            if outgoing:
                source_port, local_port = local_port, source_port
            at_address = packet + (16 if outgoing else 12)  # the server's address
            address = int.from_bytes(ring[at_address : at_address + 4], "big")
            track = self._tracks.get(track_key(local_port, source_port, address))
            if track is not None:
                flags = ring[packet + header + 13]
                total = (ring[packet + 2] << 8) | ring[packet + 3]
                length = total - header - (ring[packet + header + 12] >> 4) * 4
                stamp = seconds * 1_000_000_000 + nanoseconds
                if outgoing:
                    track.sent(flags, seq, length, stamp)
                elif flags & _TCP_SYN:
                    if flags & _TCP_ACK:
                        track.synchronise(seq)
                elif length > 0:
                    track.add(seq, length, stamp)
        ring[at : at + 4] = _KERNEL_OWNS  # the frame is the kernel's again
        self._frame = self._frame + 1 if self._frame + 1 < _RING_FRAMES else 0
        return True

    def _flush(self) -> None:
        if self._ring is not None:
            while self._drain_one(self._ring):
                pass
            return
        while True:
            try:
                self._sock.recv(1)
            except OSError:
                return


# The ring (``TPACKET_V2``): frames of 256 bytes (the frame header, the address, the copy's
# 120 bytes of headers), 64 KiB blocks, 32 MiB in all: ~131,000 copies, a second of 256
# streams at 2 ms gaps; the kernel marks a frame LOSING when it found the ring full.
_SOL_PACKET, _PACKET_VERSION, _PACKET_RX_RING, _TPACKET_V2 = 263, 10, 5, 1
_FRAME_BYTES, _BLOCK_BYTES, _RING_BLOCKS = 256, 64 * 1024, 512
_RING_FRAMES = _RING_BLOCKS * _BLOCK_BYTES // _FRAME_BYTES
_TP_STATUS_USER, _TP_STATUS_LOSING = 1, 4
# tpacket2_hdr (status, len, snaplen, mac, net, sec, nsec; 8 bytes more), then its
# sockaddr_ll's packet type (10 bytes in): PACKET_HOST for a copy received, OUTGOING sent
_FRAME = struct.Struct("IIIHHII8x10xB")
_KERNEL_OWNS = bytes(4)  # TP_STATUS_KERNEL
# A copy's IPv4 header of 20 bytes (no options) and its TCP header's fields: version and
# header length, total length, source and destination addresses; source and destination
# ports, sequence number, data offset, flags.
_PLAIN_PACKET = struct.Struct("!BxH8xIIHHI4xBB")
_PLAIN_IPV4, _PLAIN_HEADERS = 0x45, 40  # IPv4, 5 words; the copy holds both headers' fixed part


def packet_socket() -> _socket.socket | None:
    """A packet socket that gets every frame's copy (before IP; filter it at once), or None
    where this process may not open one (not Linux, no ``CAP_NET_RAW``)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return _socket.socket(socket.AF_PACKET, socket.SOCK_DGRAM, socket.htons(ETH_P_ALL))
    except (OSError, AttributeError):
        return None


def track_key(local_port: int, remote_port: int, address: int) -> int:
    """A connection's key among the tap's tracks: our port, the server's port and its IPv4
    address (as a big-endian integer) in one integer."""
    return (local_port << 48) | (remote_port << 32) | address


def _open_ring(sock: _socket.socket) -> mmap.mmap | None:
    """The socket's receive ring, mapped; None where the kernel refuses one."""
    try:
        sock.setsockopt(_SOL_PACKET, _PACKET_VERSION, _TPACKET_V2)
        request = struct.pack("IIII", _BLOCK_BYTES, _RING_BLOCKS, _FRAME_BYTES, _RING_FRAMES)
        sock.setsockopt(_SOL_PACKET, _PACKET_RX_RING, request)
        return mmap.mmap(
            sock.fileno(),
            _RING_BLOCKS * _BLOCK_BYTES,
            mmap.MAP_SHARED,
            mmap.PROT_READ | mmap.PROT_WRITE,
        )
    except (OSError, ValueError):
        return None


def _wanted_tap() -> SegmentTap | None:
    return SegmentTap.open() if wanted_clock() == SEGMENT_CLOCK else None


# One tap per process: a kernel ring sees every segment of the host, each stream's by key.
_TAP: ProcessWide[SegmentTap | None] = ProcessWide(_wanted_tap)


def process_tap() -> SegmentTap | None:
    """This process's tap, opened at the first call; None where it cannot be, or where
    ``TPOT_LOCUST_STAMPS`` asks for another clock."""
    return _TAP.get()


def arrival_clock() -> str:
    """The clock this process's reads are stamped with: ``segment`` (every segment's own
    arrival), ``kernel`` (each read's newest segment) or ``user`` (when the read returned).

    ``TPOT_LOCUST_STAMPS=kernel`` or ``user`` asks for less, e.g. to compare them."""
    wanted = wanted_clock()
    if wanted == SEGMENT_CLOCK and process_tap() is None:
        return KERNEL_CLOCK
    return wanted
