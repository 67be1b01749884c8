"""The segment tap's cost a frame, and where it goes (issue 58, item 2).

Usage: python benchmarks/tap_frame_cost.py [--quick] [--streams 256] [--rounds 5]

A fake ``TPACKET_V2`` ring (anonymous memory of the real ring's size) filled with in-order
data copies from ``--streams`` connections, one segment a frame in turn (a fast server: each
token its own segment), drained by ``SegmentTap._drain_ring`` as a run drains the real
ring. Then the same frames through loops that do only part of the work: the two header
unpacks; with the hand-back; with the track lookup; with ``SegmentTrack.add``. The steps'
differences say what each costs. us of wall time a frame (one process, nothing else
running), best of ``--rounds``. The real ring costs more: the kernel wrote each frame on
the other core (two cache misses a frame; benchmarks/README.md, stamp_cost).
"""

from __future__ import annotations

import mmap
import time
from collections.abc import Callable

from output import Table, base_parser, print_header

from tpot_locust.wire import segment_stamps as tap_module
from tpot_locust.wire.segment_stamps import SegmentTap, SegmentTrack, track_key

NET_OFFSET = 80  # where the kernel puts a copy's IP header in a frame (no link header)
SERVER = 0x7F000001  # 127.0.0.1
SERVER_PORT = 8000
SEGMENT_BYTES = 60  # one SSE token event


def fake_tap(streams: int) -> tuple[SegmentTap, mmap.mmap]:
    ring = mmap.mmap(-1, tap_module._RING_BLOCKS * tap_module._BLOCK_BYTES)
    tap = SegmentTap.__new__(SegmentTap)
    tap._sock, tap._ring, tap._frame, tap._ports, tap._tracks = None, ring, 0, set(), {}
    tap.dropped_reads = 0
    for stream in range(streams):
        track = SegmentTrack(track_key(40_000 + stream, SERVER_PORT, SERVER))
        track.synchronise(1_000)
        tap._tracks[track.key] = track
    return tap, ring


def fill(tap: SegmentTap, ring: mmap.mmap, streams: int) -> None:
    """Every frame handed to us: the next segment of each stream in turn."""
    frame_header, packet = tap_module._FRAME, tap_module._PLAIN_PACKET
    for number in range(tap_module._RING_FRAMES):
        stream = number % streams
        track = tap._tracks[track_key(40_000 + stream, SERVER_PORT, SERVER)]
        at = number * tap_module._FRAME_BYTES
        status = tap_module._TP_STATUS_USER
        frame_header.pack_into(ring, at, status, 100, 100, 0, NET_OFFSET, 1, number, 0)
        seq = (track._next_seq or 0) + (number // streams) * SEGMENT_BYTES
        total = 40 + SEGMENT_BYTES
        fields = (0x45, total, SERVER, SERVER, SERVER_PORT, 40_000 + stream, seq, 5 << 4, 0x18)
        packet.pack_into(ring, at + NET_OFFSET, *fields)
    for track in tap._tracks.values():  # each round starts where the last one ended
        track._forget(len(track.ends))


def drain(tap: SegmentTap, ring: mmap.mmap) -> None:
    tap._frame = 0
    tap._drain_ring(None, 0, tap_module._RING_FRAMES)


def unpacks(tap: SegmentTap, ring: mmap.mmap) -> None:
    frame_of, packet_of = tap_module._FRAME.unpack_from, tap_module._PLAIN_PACKET.unpack_from
    for frame in range(tap_module._RING_FRAMES):
        at = frame * tap_module._FRAME_BYTES
        _, _, _, _, net, _, _, _ = frame_of(ring, at)
        packet_of(ring, at + net)


def hand_back(tap: SegmentTap, ring: mmap.mmap) -> None:
    frame_of, packet_of = tap_module._FRAME.unpack_from, tap_module._PLAIN_PACKET.unpack_from
    owns = tap_module._KERNEL_OWNS
    for frame in range(tap_module._RING_FRAMES):
        at = frame * tap_module._FRAME_BYTES
        _, _, _, _, net, _, _, _ = frame_of(ring, at)
        packet_of(ring, at + net)
        ring[at : at + 4] = owns


def lookup(tap: SegmentTap, ring: mmap.mmap) -> None:
    frame_of, packet_of = tap_module._FRAME.unpack_from, tap_module._PLAIN_PACKET.unpack_from
    owns, tracks = tap_module._KERNEL_OWNS, tap._tracks
    for frame in range(tap_module._RING_FRAMES):
        at = frame * tap_module._FRAME_BYTES
        _, _, _, _, net, _, _, _ = frame_of(ring, at)
        _, _, address, _, source, local, _, _, _ = packet_of(ring, at + net)
        tracks.get((local << 48) | (source << 32) | address)
        ring[at : at + 4] = owns


def add(tap: SegmentTap, ring: mmap.mmap) -> None:
    frame_of, packet_of = tap_module._FRAME.unpack_from, tap_module._PLAIN_PACKET.unpack_from
    owns, tracks = tap_module._KERNEL_OWNS, tap._tracks
    for frame in range(tap_module._RING_FRAMES):
        at = frame * tap_module._FRAME_BYTES
        _, _, _, _, net, seconds, nanoseconds, _ = frame_of(ring, at)
        _, total, address, _, source, local, seq, offset, _ = packet_of(ring, at + net)
        track = tracks[(local << 48) | (source << 32) | address]
        track.add(seq, total - 20 - (offset >> 4) * 4, seconds * 1_000_000_000 + nanoseconds)
        ring[at : at + 4] = owns


STEPS: list[tuple[str, Callable[[SegmentTap, mmap.mmap], None]]] = [
    ("the two header unpacks", unpacks),
    ("+ the hand-back to the kernel", hand_back),
    ("+ the track's lookup", lookup),
    ("+ SegmentTrack.add", add),
    ("_drain_ring, whole", drain),
]


def us_a_frame(step: Callable[[SegmentTap, mmap.mmap], None], streams: int, rounds: int) -> float:
    tap, ring = fake_tap(streams)
    best = float("inf")
    for _ in range(rounds):
        fill(tap, ring, streams)
        start = time.perf_counter_ns()
        step(tap, ring)
        best = min(best, (time.perf_counter_ns() - start) / tap_module._RING_FRAMES / 1000)
    covered = sum(track.covered for track in tap._tracks.values())
    if step in (add, drain):  # every copy filed: the loops measured the real work
        assert covered == rounds * tap_module._RING_FRAMES * SEGMENT_BYTES, covered
    ring.close()
    return best


def main() -> None:
    parser = base_parser(__doc__)
    parser.add_argument("--streams", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    rounds = 2 if args.quick else args.rounds
    frames = tap_module._RING_FRAMES
    print_header(
        "The segment tap's cost a frame",
        [f"a fake ring of {frames:,} frames, {args.streams} streams, best of {rounds}"],
    )
    first = us_a_frame(drain, args.streams, rounds)  # a process's first drains run slower
    table = Table(["step", "us a frame", "this step's own"])
    before = 0.0
    for name, step in STEPS:
        cost = us_a_frame(step, args.streams, rounds)
        table.row(name, cost, cost - before if step is not drain else float("nan"))
        before = cost
    print(f"\n(the process's first {rounds} drains, not in the table: {first:.2f} us a frame)")


if __name__ == "__main__":
    main()
