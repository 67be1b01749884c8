"""One connection's segment copies matched to the bytes read: each piece of a read carries
its own segment's stamp, whatever order, repeats or sequence wrap the copies came in; and
the tap's ring read as the kernel fills it."""

from __future__ import annotations

import mmap
import struct

import pytest

from tpot_locust.common import env_vars
from tpot_locust.common.kernel_stamps import wanted_clock
from tpot_locust.wire.segment_stamps import _FRAME_BYTES, SegmentTap, SegmentTrack, track_key

ISN = 1_000


def track_of(*segments: tuple[int, int, int], isn: int = ISN) -> SegmentTrack:
    """A track fed ``(offset, length, stamp)`` copies, in the order given."""
    track = SegmentTrack()
    track.synchronise(isn)
    for offset, length, stamp in segments:
        track.add((isn + 1 + offset) % (1 << 32), length, stamp)
    return track


def test_a_read_of_several_segments_is_cut_where_each_ended() -> None:
    track = track_of((0, 10, 100), (10, 5, 200), (15, 20, 300))
    data = bytes(range(35))
    assert track.cut(0, data) == [(data[:10], 100), (data[10:15], 200), (data[15:], 300)]
    assert track.unrecovered == 0


def test_a_segment_split_over_two_reads_gives_both_parts_its_stamp() -> None:
    track = track_of((0, 10, 100), (10, 10, 200))
    assert track.cut(0, b"a" * 4) == [(b"a" * 4, 100)]
    assert track.cut(4, b"b" * 10) == [(b"b" * 6, 100), (b"b" * 4, 200)]
    assert track.cut(14, b"c" * 6) == [(b"c" * 6, 200)]


def test_bytes_no_copy_covered_come_last_without_a_stamp() -> None:
    track = track_of((0, 10, 100))
    assert track.cut(0, b"x" * 15) == [(b"x" * 10, 100), (b"x" * 5, None)]
    assert track.unrecovered == 5


def test_a_retransmission_keeps_the_first_arrival() -> None:
    track = track_of((0, 10, 100), (0, 10, 900), (10, 10, 200))
    assert [stamp for _, stamp in track.cut(0, b"x" * 20)] == [100, 200]


def test_segments_past_a_hole_are_readable_when_it_fills() -> None:
    """A lost segment's retransmission arrives last: what came after it waited in the
    kernel until then, so those bytes were readable no earlier than the fill."""
    track = track_of((0, 10, 100), (20, 10, 300), (10, 10, 500))
    assert track.covered == 30
    assert [stamp for _, stamp in track.cut(0, b"x" * 30)] == [100, 500, 500]


def test_sequence_numbers_wrap_around() -> None:
    track = track_of((0, 10, 100), (10, 10, 200), isn=(1 << 32) - 15)
    assert track.covered == 20
    assert [stamp for _, stamp in track.cut(0, b"x" * 20)] == [100, 200]


def test_a_missed_syn_ack_starts_the_stream_at_the_first_copy() -> None:
    track = SegmentTrack()
    track.add(5_000, 10, 100)
    track.add(5_010, 10, 200)
    assert [stamp for _, stamp in track.cut(0, b"x" * 20)] == [100, 200]


def test_a_long_stream_forgets_what_was_read() -> None:
    track = track_of(*((offset * 10, 10, offset) for offset in range(10_000)))
    for offset in range(0, 100_000, 10):
        assert track.cut(offset, b"x" * 10) == [(b"x" * 10, offset // 10)]
    assert len(track.ends) < 5_000


def test_an_unknown_stamps_clock_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(env_vars.STAMPS, "kernal")
    with pytest.raises(ValueError, match="TPOT_LOCUST_STAMPS='kernal': not one of segment"):
        wanted_clock()
    monkeypatch.setenv(env_vars.STAMPS, "user")
    assert wanted_clock() == "user"


def _ring_frame(
    ring: mmap.mmap,
    index: int,
    port: int,
    seq: int,
    length: int,
    stamp: int,
    flags: int = 0x18,
    options: bytes = b"",
    sent: bool = False,
) -> None:
    """Frame ``index`` of a ``TPACKET_V2`` ring as the kernel leaves it: header (status
    user), then the copy of a segment from 127.0.0.1:8000 to ``port``, headers only
    (``sent``: one we sent, from ``port`` to 8000: its packet type PACKET_OUTGOING)."""
    at, net, ip_header = index * _FRAME_BYTES, 80, 20 + len(options)
    struct.pack_into(
        "IIIHHII",
        ring,
        at,
        1,
        ip_header + 20 + length,
        ip_header + 20,
        net,
        net,
        stamp // 1_000_000_000,
        stamp % 1_000_000_000,
    )
    loopback = bytes([127, 0, 0, 1])
    struct.pack_into(
        "!BBHHHBBH4s4s",
        ring,
        at + net,
        0x40 | ip_header // 4,
        0,
        ip_header + 20 + length,
        0,
        0x4000,
        64,
        6,
        0,
        loopback,
        loopback,
    )
    ring[at + net + 20 : at + net + ip_header] = options
    ports = (port, 8000) if sent else (8000, port)
    struct.pack_into(
        "!HHIIBBHHH", ring, at + net + ip_header, *ports, seq, 1, 0x50, flags, 512, 0, 0
    )
    ring[at + 42] = 4 if sent else 0  # sockaddr_ll's packet type, 10 bytes into it


def test_the_ring_files_every_copy_whatever_its_ip_header() -> None:
    """Plain IPv4 headers take the ring's fast path, a header with options the general one
    (``_drain_one``); both file the same copies, a SYN-ACK synchronises, other ports pass."""
    ring = mmap.mmap(-1, 8 * _FRAME_BYTES)
    tap = SegmentTap(None, ring)  # type: ignore[arg-type]  # the socket is not used here
    loopback = int.from_bytes(bytes([127, 0, 0, 1]), "big")
    track = SegmentTrack(track_key(40000, 8000, loopback))
    tap._tracks[track.key] = track
    _ring_frame(ring, 0, 40000, ISN, 0, 50, flags=0x12)  # SYN-ACK
    _ring_frame(ring, 1, 40000, ISN + 1, 10, 100)
    _ring_frame(ring, 2, 40001, ISN + 11, 7, 150)  # another connection's
    _ring_frame(ring, 3, 40000, ISN + 11, 5, 200, options=bytes([1, 1, 1, 0]))  # NOPs, EOL
    _ring_frame(ring, 4, 40000, ISN + 16, 20, 300)
    tap.drain(track, 35)
    assert tap._frame == 5 and track.covered == 35
    assert all(ring[index * _FRAME_BYTES] == 0 for index in range(5))  # handed back
    data = bytes(range(35))
    assert track.cut(0, data) == [(data[:10], 100), (data[10:15], 200), (data[15:], 300)]
    tap.drain()  # nothing more is ready: returns
    assert tap._frame == 5


def test_the_ring_keeps_when_each_request_left() -> None:
    """Copies of what we sent (our SYN, then data): when the segment that began with a
    given byte of ours left; an acknowledgement carries none (the filter drops them)."""
    ring = mmap.mmap(-1, 8 * _FRAME_BYTES)
    tap = SegmentTap(None, ring)  # type: ignore[arg-type]  # the socket is not used here
    loopback = int.from_bytes(bytes([127, 0, 0, 1]), "big")
    track = SegmentTrack(track_key(40000, 8000, loopback))
    tap._tracks[track.key] = track
    ours = 7_000
    _ring_frame(ring, 0, 40000, ours, 0, 10, flags=0x02, sent=True)  # our SYN
    _ring_frame(ring, 1, 40000, ISN, 0, 20, flags=0x12)  # the server's SYN-ACK
    _ring_frame(ring, 2, 40000, ours + 1, 300, 30, sent=True)  # a request
    _ring_frame(ring, 3, 40000, ISN + 1, 10, 40)  # its answer
    _ring_frame(ring, 4, 40000, ours + 301, 200, 50, sent=True, options=bytes([1, 1, 1, 0]))
    tap.drain()
    assert tap._frame == 5 and track.covered == 10  # what we sent is not the server's
    assert track._departures == {0: 30, 300: 50}  # the fast path's and the general one's
    assert track.departure(300) == 50
    assert track.departure(0) is None  # asked once: the copies before went
    _ring_frame(ring, 5, 40000, ours + 501, 100, 60, sent=True)
    tap.drain()
    assert track.departure(500) == 60


def test_data_past_a_hole_is_data_waiting() -> None:
    """A batch reads a socket the tap saw data come to; a copy the ring lost must not hide
    the bytes after it (``has_data_after``)."""
    track = track_of((0, 10, 100))
    assert track.has_data_after(0) and not track.has_data_after(10)
    track.add(ISN + 1 + 20, 10, 300)  # bytes 20-30; the copy of 10-20 was lost
    assert track.covered == 10 and track.has_data_after(10)


def test_a_lost_copy_leaves_the_rest_of_the_connection_stamped() -> None:
    """The ring lost the copy of bytes 10-20: the read over it keeps the read's stamp for
    what no copy covered, and the track goes on past it (it was stuck there for good)."""
    track = track_of((0, 10, 100), (20, 10, 300), (30, 10, 400))  # 10-20 never came
    assert track.covered == 10
    pieces = track.cut(0, b"x" * 35)
    assert pieces == [(b"x" * 10, 100), (b"x" * 25, None)]
    assert track.covered == 40 and not track.has_data_after(40)  # 30-40 waited past the hole
    assert track.cut(35, b"y" * 5) == [(b"y" * 5, 400)]
    track.add(ISN + 1 + 40, 10, 500)
    assert track.cut(40, b"z" * 10) == [(b"z" * 10, 500)]
    track.add(ISN + 1 + 10, 10, 200)  # the lost copy, late: a repeat of what was read
    assert track.covered == 50 and track.unrecovered == 25
