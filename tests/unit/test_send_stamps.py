"""The simulator's transmit stamps, on real loopback connections: a write sent at once is
stamped inside its call; one TCP held back (the client's window full) keeps the loop's."""

from __future__ import annotations

import socket
import struct
import sys
import time
from collections.abc import Iterator

import pytest

from tpot_locust.common.clock import wall_minus_perf_ns
from tpot_locust.sim.send_stamps import SO_TIMESTAMPING, SendStamps, send_truth

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux's stamps")


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    """(server side, client side) of one loopback connection; the client's window small."""
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # inherited, before SYN
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    client = socket.socket()
    client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    client.connect(listener.getsockname())
    server, _ = listener.accept()
    listener.close()
    server.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    server.setblocking(False)
    yield server, client
    server.close()
    client.close()


def timed_write(server: socket.socket, stamps: SendStamps, data: bytes) -> tuple[int, int, int]:
    """Write as the simulator does; (last byte's offset, perf ns before, after)."""
    before = time.perf_counter_ns()
    server.send(data)
    last = stamps.wrote(len(data))
    return last, before, time.perf_counter_ns()


def test_a_response_takes_each_writes_own_stamp(pair) -> None:
    """``sent`` gives each token write the kernel's stamp from within its call; ``settle``
    leaves them, and counts the events."""
    server, client = pair
    stamps = SendStamps.enable(server)
    assert stamps is not None
    server.send(b"head")
    stamps.wrote(len(b"head"))
    stamps.begin()
    send_ns, calls = [], []
    for events in (1, 2, 1):
        before = time.perf_counter_ns()
        server.send(b"z" * 120)
        stamps.wrote(120)
        send_ns += [stamps.sent(before, len(send_ns), events)] * events
        calls.append((before, time.perf_counter_ns()))
    assert stamps.settle(send_ns, 0) == 4
    for stamp, (before, after) in zip(send_ns[:2] + send_ns[3:], calls, strict=True):
        assert before <= stamp <= after + 20_000
    client.settimeout(5)
    received = 0
    while received < 364:
        received += len(client.recv(4096))


def test_a_write_sent_at_once_is_stamped_inside_its_call(pair) -> None:
    server, client = pair
    stamps = SendStamps.enable(server)
    assert stamps is not None
    writes = [timed_write(server, stamps, b"x" * size) for size in (100, 50, 200)]
    assert [last for last, _, _ in writes] == [99, 149, 349]
    offset = wall_minus_perf_ns()
    for last, before, after in writes:
        truth = send_truth(before, after, stamps.stamp_at(last), offset)
        assert truth is not None and before <= truth <= after + 20_000
    assert stamps.stamp_at(50) is None  # no segment ended there
    assert stamps.stamp_at(99) is None  # taken out
    stamps.begin()
    assert stamps.stamp_at(149) is None
    received = b""
    while len(received) < 350:
        received += client.recv(4096)


def test_a_write_the_window_held_back_keeps_the_loops_stamp(pair) -> None:
    """The client reads nothing until the writes are done: those its window could not take
    leave later, merged into other segments; none of them gets a stamp from outside its
    call, so the truth never hides the wait the client's window caused."""
    server, client = pair
    stamps = SendStamps.enable(server)
    assert stamps is not None
    writes = []
    for _ in range(400):  # 80 KB into a 4 KB window: most of it waits in the send buffer
        try:
            writes.append(timed_write(server, stamps, b"y" * 200))
        except BlockingIOError:
            break
    client.settimeout(5)
    received = 0
    while received < 200 * len(writes):
        received += len(client.recv(65536))
    time.sleep(0.05)
    stamps.collect()
    offset = wall_minus_perf_ns()
    truths = [send_truth(before, after, stamps.stamp_at(last), offset)
              for last, before, after in writes]  # fmt: skip
    assert truths[0] is not None  # the first left at once
    held = [truth for truth in truths if truth is None]
    assert len(held) > len(writes) // 2, (len(held), len(writes))
    for (_, before, after), truth in zip(writes, truths, strict=True):
        assert truth is None or before <= truth <= after + 20_000


class _ErrorQueue:
    """A socket whose error queue holds the given control messages, once each."""

    def __init__(self, *messages: list[tuple[int, int, bytes]]) -> None:
        self._messages = list(messages)

    def recvmsg(self, size: int, ancillary: int, flags: int) -> tuple:
        if not self._messages:
            raise BlockingIOError
        return b"", self._messages.pop(0), 0, None


def test_a_stamp_is_read_whatever_order_its_control_messages_come_in() -> None:
    stamp = struct.pack("@qq", 12, 345) + bytes(32)  # SCM_TIMESTAMPING: three timespecs
    key = struct.pack("IBBBBII", 42, 4, 0, 0, 0, 0, 99) + bytes(16)  # ENOMSG, TIMESTAMPING
    other = struct.pack("IBBBBII", 42, 2, 0, 0, 0, 0, 7) + bytes(16)  # not a stamp's origin
    stamps = SendStamps(_ErrorQueue(  # type: ignore[arg-type]
        [(socket.SOL_SOCKET, SO_TIMESTAMPING, stamp), (socket.SOL_IP, 11, key)],
        [(socket.SOL_IP, 11, key[:12] + struct.pack("I", 149) + key[16:]),
         (socket.SOL_SOCKET, SO_TIMESTAMPING, stamp)],
        [(socket.SOL_SOCKET, SO_TIMESTAMPING, stamp), (socket.SOL_IP, 11, other)],
    ))  # fmt: skip
    stamps.collect()
    assert stamps.stamp_at(99) == stamps.stamp_at(149 + (1 << 32)) == 12_000_000_345
    assert stamps.stamp_at(7) is None
