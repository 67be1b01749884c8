"""The segment tap against real sockets: ten (or forty) events sent 2 ms apart wait
together in a socket while the reader is held; the stream socket's own stamp is the last
one's for all (the kernel merges them), the tap gives each its own, through the ring (forty:
many waiting at once) and through recvmsg."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from tpot_locust.common import env_vars
from tpot_locust.common.kernel_stamps import SO_TIMESTAMPNS, kernel_wall_ns
from tpot_locust.wire.segment_stamps import SegmentTap, process_tap

GAP_S, SIZE = 0.002, 120

pytestmark = pytest.mark.skipif(process_tap() is None, reason="no tap here (needs CAP_NET_RAW)")


def _send_events(listener: socket.socket, sent: list[tuple[int, int]], events: int) -> None:
    """Each event's send, bracketed by the wall clock before and after it: on a busy
    machine the sender can be held between reading the clock and sending."""
    connection, _ = listener.accept()
    connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    for index in range(events):
        before_ns = time.time_ns()
        connection.sendall(bytes([65 + index]) * SIZE)
        sent.append((before_ns, time.time_ns()))
        time.sleep(GAP_S)
    time.sleep(0.5)
    connection.close()


@pytest.mark.parametrize(("ring", "events"), [("1", 10), ("1", 40), ("0", 10)])
def test_each_waiting_segment_keeps_its_own_stamp(
    monkeypatch: pytest.MonkeyPatch, ring: str, events: int
) -> None:
    monkeypatch.setenv(env_vars.SEGMENT_RING, ring)
    tap = SegmentTap.open()
    assert tap is not None and (tap._ring is not None) == (ring == "1")
    listener = socket.create_server(("127.0.0.1", 0))
    reader = socket.socket()
    reader.bind(("127.0.0.1", 0))
    reader.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    track = tap.watch(reader.getsockname()[1], "127.0.0.1", listener.getsockname()[1])
    sent: list[tuple[int, int]] = []
    sender = threading.Thread(target=_send_events, args=(listener, sent, events), daemon=True)
    sender.start()
    reader.connect(listener.getsockname())
    time.sleep(events * GAP_S + 0.08)  # the reader held: every event waits in the socket
    data, ancillary, _, _ = reader.recvmsg(65536, socket.CMSG_SPACE(16))
    read_stamp = kernel_wall_ns(ancillary)
    assert len(data) == events * SIZE
    assert read_stamp is not None and sent[-1][0] <= read_stamp <= sent[-1][1] + 1e6  # newest
    tap.drain(track, len(data))
    pieces = track.cut(0, data)
    assert [piece[0] - 65 for piece, _ in pieces] == list(range(events))
    stamps = [stamp for _, stamp in pieces]
    assert all(
        before <= stamp <= after + 1e6  # type: ignore[operator]
        for (before, after), stamp in zip(sent, stamps, strict=True)
    ), (sent, stamps)
    reader.close()
    listener.close()
    sender.join()
    tap.close()
