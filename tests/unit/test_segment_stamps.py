"""One connection's segment copies matched to the bytes read: each piece of a read carries
its own segment's stamp, whatever order, repeats or sequence wrap the copies came in."""

from __future__ import annotations

import pytest

from tpot_locust.common.kernel_stamps import STAMPS_ENV, wanted_clock
from tpot_locust.wire.segment_stamps import SegmentTrack, _filter

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


def test_the_filter_keeps_the_watched_ports_only() -> None:
    assert len(_filter([])) == 8  # "ret 0": nothing
    program = _filter([8000, 9000])
    assert len(program) == 8 * (10 + 2 + 1 + 5)  # checks, a jump per port, drop, keep


def test_an_unknown_stamps_clock_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(STAMPS_ENV, "kernal")
    with pytest.raises(ValueError, match="TPOT_LOCUST_STAMPS='kernal': not one of segment"):
        wanted_clock()
    monkeypatch.setenv(STAMPS_ENV, "user")
    assert wanted_clock() == "user"
