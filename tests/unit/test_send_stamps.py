"""The simulator's transmit stamps, on real loopback connections: a write sent at once is
stamped inside its call; one TCP held back (the client's window full) keeps the loop's."""

from __future__ import annotations

import asyncio
import os
import socket
import struct
import sys
import time
from collections.abc import Iterator

import pytest

from tpot_locust.common.clock import wall_minus_perf_ns
from tpot_locust.common.kernel_stamps import SO_TIMESTAMPNS, enable_kernel_stamps
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
    truths = [
        send_truth(before, after, stamps.stamp_at(last), offset) for last, before, after in writes
    ]
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
    stamps = SendStamps(
        _ErrorQueue(  # type: ignore[arg-type]
            [(socket.SOL_SOCKET, SO_TIMESTAMPING, stamp), (socket.SOL_IP, 11, key)],
            [
                (socket.SOL_IP, 11, key[:12] + struct.pack("I", 149) + key[16:]),
                (socket.SOL_SOCKET, SO_TIMESTAMPING, stamp),
            ],
            [(socket.SOL_SOCKET, SO_TIMESTAMPING, stamp), (socket.SOL_IP, 11, other)],
            [
                (socket.SOL_SOCKET, SO_TIMESTAMPNS, struct.pack("@qq", 1, 2)),  # a read's stamp
                (
                    socket.SOL_SOCKET,
                    SO_TIMESTAMPING,
                    stamp[:8] + struct.pack("@q", 346) + stamp[16:],
                ),
                (socket.SOL_IP, 11, key[:12] + struct.pack("I", 199) + key[16:]),
            ],
            [
                (socket.SOL_SOCKET, SO_TIMESTAMPNS, struct.pack("@qq", 1, 2)),
                (socket.SOL_IP, 11, key[:12] + struct.pack("I", 249) + key[16:]),
                (
                    socket.SOL_SOCKET,
                    SO_TIMESTAMPING,
                    stamp[:8] + struct.pack("@q", 347) + stamp[16:],
                ),
            ],
        )
    )
    stamps.collect()
    assert stamps.stamp_at(99) == stamps.stamp_at(149 + (1 << 32)) == 12_000_000_345
    assert stamps.stamp_at(7) is None
    assert stamps.stamp_at(199) == 12_000_000_346  # never the read's stamp
    assert stamps.stamp_at(249) == 12_000_000_347


class _Transport:
    """What ``SendStamps.send`` asks of asyncio's transport; its writes kept."""

    def __init__(self, buffered: int = 0) -> None:
        self.buffered = buffered
        self.writes: list[bytes] = []

    def get_write_buffer_size(self) -> int:
        return self.buffered

    def is_closing(self) -> bool:
        return False

    def write(self, data: bytes) -> None:
        self.writes.append(data)


@pytest.mark.parametrize("reads_stamped", [False, True])
def test_the_fast_path_gives_each_write_its_own_stamp(pair, reads_stamped: bool) -> None:
    """Token writes straight to the socket, one after another: each write's truth is the
    kernel's stamp of its own last byte, read back inside its call (none lost, none taken
    by a neighbour), and every event counts as kernel-stamped; also where the socket's
    reads are stamped too, as the simulator's are (a third control message comes first)."""
    server, client = pair
    if reads_stamped:
        assert enable_kernel_stamps(server)
    stamps = SendStamps.enable(server)
    assert stamps is not None
    stamps.begin()
    transport, send_ns, calls = _Transport(), [], []
    for index, events in enumerate((1, 1, 3, 1, 2, 1)):
        data = bytes([65 + index]) * (100 + index)
        before = time.perf_counter_ns()
        send_ns += [stamps.send(transport, data, len(send_ns), events)] * events  # type: ignore[arg-type]
        calls.append((before, time.perf_counter_ns(), events))
    assert transport.writes == []  # all went straight to the socket
    assert stamps.settle(send_ns, 0) == len(send_ns) == 9
    assert send_ns == sorted(send_ns)
    at = 0
    for before, after, events in calls:
        assert len(set(send_ns[at : at + events])) == 1
        assert before <= send_ns[at] <= after + 20_000
        at += events
    assert len(set(send_ns)) == len(calls)  # each write its own stamp
    client.settimeout(5)
    received = b""
    while len(received) < sum(100 + i for i in range(6)):
        received += client.recv(4096)
    assert received == b"".join(bytes([65 + i]) * (100 + i) for i in range(6))


class _FakeKernel:
    """A socket whose sends are stamped as the test says: ``stamps[n]`` is the wall time
    (or None: no stamp) of the n-th send's last byte; ``short`` sends take fewer bytes."""

    def __init__(self, stamps: list[int | None], short: dict[int, int] | None = None) -> None:
        self._stamps = stamps
        self._short = short or {}
        self._sends = 0
        self._offset = 0
        self._queue: list[list[tuple[int, int, bytes]]] = []

    def send(self, data: bytes) -> int:
        size = self._short.get(self._sends, len(data))
        self._offset += size
        wall = self._stamps[self._sends]
        self._sends += 1
        if wall is not None and size == len(data):
            key = struct.pack("IBBBBII", 42, 4, 0, 0, 0, 0, self._offset - 1) + bytes(16)
            stamp = struct.pack("@qq", wall // 1_000_000_000, wall % 1_000_000_000)
            self._queue.append(
                [(socket.SOL_SOCKET, SO_TIMESTAMPING, stamp + bytes(32)), (socket.SOL_IP, 11, key)]
            )
        return size

    def recvmsg(self, size: int, ancillary: int, flags: int) -> tuple:
        if not self._queue:
            raise BlockingIOError
        return b"", self._queue.pop(0), 0, None


def test_the_fast_path_never_gives_a_write_a_stamp_not_its_own() -> None:
    """A write with no stamp of its own keeps the loop's (not its neighbour's); a stamp
    from outside the call is refused; a short send's rest goes through the transport, in
    order, and that write keeps the loop's stamp too."""
    now = time.perf_counter_ns()
    offset = wall_minus_perf_ns()
    inside = now + offset + 10_000_000  # later than every call: refused unless moved in
    kernel = _FakeKernel([None, inside, None, None])
    stamps = SendStamps(kernel)  # type: ignore[arg-type]
    transport = _Transport()
    first = stamps.send(transport, b"a" * 10, 0, 1)  # type: ignore[arg-type]
    assert first <= time.perf_counter_ns()  # the loop's stamp: no stamp came
    second = stamps.send(transport, b"b" * 10, 1, 1)  # type: ignore[arg-type]
    assert second < inside - offset  # its stamp fell outside its call: the loop's
    assert stamps.kernel_events == 0
    kernel._short = {2: 4}
    stamps.send(transport, b"c" * 10, 2, 1)  # type: ignore[arg-type]
    assert transport.writes == [b"c" * 6]  # the rest, through the transport
    assert stamps.written == 30
    transport.buffered = 6  # bytes still queued there: the next write goes behind them
    stamps.send(transport, b"d" * 10, 3, 1)  # type: ignore[arg-type]
    assert transport.writes == [b"c" * 6, b"d" * 10]
    assert stamps.written == 40


def test_the_fast_path_takes_a_stamp_inside_its_call_exactly(monkeypatch) -> None:
    """The stamp of each write's own last byte, to the nanosecond, on the perf clock."""
    kernel = _FakeKernel([])
    stamps = SendStamps(kernel)  # type: ignore[arg-type]
    offset = stamps._wall_minus_perf
    kernel._stamps = [1_000_400 + offset, 1_002_700 + offset, None, 1_006_000 + offset]
    clock = iter(range(1_000_000, 10_000_000, 1_000))  # before, after: 1 us apart
    monkeypatch.setattr(time, "perf_counter_ns", lambda: next(clock))
    transport = _Transport()
    got = [stamps.send(transport, b"x" * 8, i, 1) for i in range(4)]  # type: ignore[arg-type]
    # calls: [1_000_000, 1_001_000], [1_002_000, 1_003_000], [1_004_000, ...], [1_006_000, ...]
    assert got == [1_000_400, 1_002_700, 1_004_000, 1_006_000]
    assert stamps.kernel_events == 3


def test_writes_asyncio_holds_keep_their_order_and_the_loops_stamps(pair) -> None:
    """The client reads nothing at first: the window fills, a send goes short and its rest
    waits in asyncio's transport, and every later write queues behind it there. The
    client gets every byte in order, and no write has a stamp from outside its call."""
    server, client = pair
    server.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)  # the kernel holds little
    duplicate = socket.socket(fileno=os.dup(server.fileno()))
    duplicate.setblocking(False)
    stamps = SendStamps.enable(duplicate)
    assert stamps is not None
    writes = [bytes([65 + index % 26]) * 200 for index in range(300)]  # 60 KB, 4 KB window

    def read_all() -> bytes:
        client.settimeout(10)
        received = b""
        while len(received) < 200 * len(writes):
            received += client.recv(65536)
        return received

    async def main() -> tuple[list[int], list[tuple[int, int]], bytes]:
        loop = asyncio.get_running_loop()
        transport, _ = await loop.connect_accepted_socket(asyncio.Protocol, sock=server)
        send_ns: list[int] = []
        stamps.begin()
        calls = []
        for data in writes:
            before = time.perf_counter_ns()
            send_ns.append(stamps.send(transport, data, len(send_ns), 1))  # type: ignore[arg-type]
            calls.append((before, time.perf_counter_ns()))
        assert transport.get_write_buffer_size() > 0  # asyncio holds the rest
        received = await loop.run_in_executor(None, read_all)
        await asyncio.sleep(0.05)
        stamps.settle(send_ns, 0)
        transport.close()
        return send_ns, calls, received

    send_ns, calls, received = asyncio.run(main())
    duplicate.close()
    assert received == b"".join(writes)
    assert stamps.written == len(received)
    assert 0 < stamps.kernel_events < len(writes)  # the first left at once, most waited
    for stamp, (before, after) in zip(send_ns, calls, strict=True):
        assert before <= stamp <= after + 20_000
