"""The floor: CPU per token event of a reader that does nothing but wait and read.

Usage: python benchmarks/read_floor.py [--gaps 1,5] [--streams 16,64] [--seconds 4] [--no-pin]

N keep-alive streams from the simulator (its own process, a fixed gap, long requests), read
by this process in one of two ways that parse nothing (events are counted by their blank
line): ``epoll``, a bare ``select.epoll`` loop reading each ready socket once per wake-up
(``recvmsg`` with kernel stamps, as ours does), and ``gevent``, gevent's event loop calling
a one-line callback per ready socket (the way ``tpot_locust.wire.loop_reads`` reads). Whatever
a client does on top (framing, SSE, classification, recording) comes on top of this.
Columns: events/s, reads per wake-up of the loop, CPU microseconds per event in user space
and in the kernel (``os.times``), and their sum. Compare ``accuracy.py``'s us/ev with this
in the same sitting: on a VM the kernel's share alone can exceed a per-event CPU budget.
"""

from __future__ import annotations

from gevent import monkey

monkey.patch_all()

import json  # noqa: E402
import os  # noqa: E402
import socket  # noqa: E402
import time  # noqa: E402

import gevent  # noqa: E402
from output import Table, add_pin_argument, base_parser, parse_list, print_header  # noqa: E402
from probes import pin_other, pinning_note, set_pinning  # noqa: E402

from tpot_locust.sim.process import start_simulator  # noqa: E402

_SO_TIMESTAMPNS = 35
_epoll = monkey.get_original("select", "epoll")  # gevent's select has none
_EPOLLIN = monkey.get_original("select", "EPOLLIN")
_ANCILLARY = socket.CMSG_SPACE(16)
READERS = ("epoll", "gevent")


def open_streams(port: int, streams: int, tokens: int) -> list[socket.socket]:
    """N raw sockets, each with a streaming request sent and its response head read."""
    body = json.dumps(
        {
            "model": "tpot-sim",
            "stream": True,
            "max_tokens": tokens,
            "min_tokens": tokens,
            "ignore_eos": True,
            "messages": [{"role": "user", "content": "hi"}],
        }
    ).encode()
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    sockets = []
    for _ in range(streams):
        sock = socket.create_connection(("127.0.0.1", port))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
        sock.sendall(head.encode() + body)
        sockets.append(sock)
    return sockets


class Counts:
    def __init__(self) -> None:
        self.events = 0
        self.reads = 0
        self.wakes = 0


def read_with_epoll(sockets: list[socket.socket], until: float, counts: Counts) -> None:
    raw = {sock.fileno(): sock._sock for sock in sockets}  # the OS sockets under gevent's
    poller = _epoll()
    for fileno in raw:
        poller.register(fileno, _EPOLLIN)
    while time.perf_counter() < until:
        ready = poller.poll(0.1)
        counts.wakes += 1
        for fileno, _ in ready:
            data = raw[fileno].recvmsg(65536, _ANCILLARY)[0]
            counts.reads += 1
            counts.events += data.count(b"\n\n")
    poller.close()


def read_with_gevent(sockets: list[socket.socket], until: float, counts: Counts) -> None:
    loop = gevent.get_hub().loop
    watchers = []
    for sock in sockets:
        raw = sock._sock

        def on_readable(raw: socket.socket = raw) -> None:
            data = raw.recvmsg(65536, _ANCILLARY)[0]
            counts.reads += 1
            counts.events += data.count(b"\n\n")

        watcher = loop.io(sock.fileno(), 1)
        watcher.start(on_readable)
        watchers.append(watcher)
    gevent.sleep(until - time.perf_counter())
    for watcher in watchers:
        watcher.close()


def run_case(reader: str, gap_ms: float, streams: int, seconds: float) -> tuple[float, ...]:
    tokens = int((seconds + 2) * 1000 / gap_ms) + 100  # every stream outlasts the window
    with start_simulator("--gap-ms", f"{gap_ms:g}", "--ttft-ms", "5") as sim:
        pin_other(sim.process.pid)
        sockets = open_streams(int(sim.url.rsplit(":", 1)[1]), streams, tokens)
        time.sleep(0.5)  # every stream past its head and first tokens
        for sock in sockets:  # drain what queued meanwhile
            sock._sock.setblocking(False)
            try:
                while sock._sock.recv(1 << 20):
                    pass
            except BlockingIOError:
                pass
        counts = Counts()
        before, started = os.times(), time.perf_counter()
        read = read_with_epoll if reader == "epoll" else read_with_gevent
        read(sockets, started + seconds, counts)
        after, wall = os.times(), time.perf_counter() - started
        for sock in sockets:
            sock.close()
    events = max(counts.events, 1)
    user_us = (after.user - before.user) / events * 1e6
    system_us = (after.system - before.system) / events * 1e6
    wakes = counts.wakes or float("nan")
    return (counts.events / wall, counts.reads / wakes, user_us, system_us, user_us + system_us)


def main() -> None:
    parser = base_parser(__doc__)
    parser.add_argument("--gaps", default="1,5", help="true gaps, ms")
    parser.add_argument("--streams", default="16,64")
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--readers", default=",".join(READERS))
    add_pin_argument(parser)
    args = parser.parse_args()
    set_pinning(not args.no_pin)
    if args.quick:
        args.gaps, args.streams, args.seconds = "5", "16", 2.0
    print_header("read floor: CPU per event of a reader that parses nothing", [pinning_note()])
    table = Table(
        [
            "gap ms",
            "streams",
            "reader",
            "events/s",
            "reads/wake",
            "user us/ev",
            "kernel us/ev",
            "us/ev",
        ]
    )
    for gap_ms in parse_list(args.gaps, float):
        for streams in parse_list(args.streams):
            for reader in parse_list(args.readers, str):
                table.row(gap_ms, streams, reader, *run_case(reader, gap_ms, streams, args.seconds))


if __name__ == "__main__":
    main()
