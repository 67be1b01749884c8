"""The floor under the simulator's CPU per token event: a bare loop that only sends.

Usage: python benchmarks/sim_floor.py [--streams 64,256] [--gap-ms 2] [--seconds 5]
                                      [--rounds 2] [--client-nap-ms 0] [--tick-us 1000]

Issue 45 item 2 asks the simulator for a third of its CPU per token event with the truth kept
as now: one write a token, its departure read from the kernel's transmit stamp. This is the
least any simulator built that way can cost here: ``--streams`` loopback TCP connections,
each sent a 150-byte SSE chunk on its own 2 ms grid by a plain Python loop (no asyncio, no
HTTP, no truth kept; ~1 us of Python a write), the client a raw epoll reader in another
process (``sim_engine.drive``'s way of reading: each socket as soon as it is ready, as a real
client does, or in batches with ``--client-nap-ms``). Three senders, alternating:

- ``send``: one ``send`` a token, nothing else;
- ``send+stamp``: transmit stamps on (``SO_TIMESTAMPING``, as ``sim/send_stamps.py``) and
  one ``recvmsg(MSG_ERRQUEUE)`` after each send, the stamp parsed: the truth's own cost;
- ``idle``: the same loop and wake-ups, no send (what the loop and its sleeps cost).

The sender's CPU (user + kernel, ``os.times``) is divided by the writes it made. Compare the
simulator's ``sim_cost`` figure in the same sitting.
"""

from __future__ import annotations

import argparse
import heapq
import math
import multiprocessing
import os
import select
import socket
import struct
import sys
import time

from tpot_locust.sim.send_stamps import _FLAGS, SO_TIMESTAMPING  # the simulator's own stamps

CHUNK = (
    b'data: {"id":"chatcmpl-0000000000","object":"chat.completion.chunk","created":0,'
    b'"model":"sim","choices":[{"index":0,"delta":{"content":" word"}}]}\n\n'
)


def read_all(port: int, streams: int, seconds: float, nap_s: float) -> None:
    """The client: ``streams`` connections read until the sender closes them."""
    poller = select.epoll()
    socks: dict[int, socket.socket] = {}
    for _ in range(streams):
        sock = socket.create_connection(("127.0.0.1", port))
        sock.setblocking(False)
        socks[sock.fileno()] = sock
        poller.register(sock.fileno(), select.EPOLLIN)
    end = time.monotonic() + seconds + 5
    while socks and time.monotonic() < end:
        if nap_s:
            time.sleep(nap_s)
        for fd, _ in poller.poll(0.05):
            try:
                data = socks[fd].recv(1 << 18)
            except BlockingIOError:
                continue
            if not data:
                poller.unregister(fd)
                socks.pop(fd).close()


def send_loop(
    conns: list[socket.socket], mode: str, gap_ns: int, seconds: float, tick_ns: int
) -> dict:
    """Each connection a chunk on its own grid until ``seconds`` pass: CPU per write."""
    stamped = mode == "send+stamp"
    if stamped:
        for conn in conns:
            conn.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPING, _FLAGS)
    start = time.perf_counter_ns()
    due_heap = [(start + gap_ns * index // len(conns), index) for index in range(len(conns))]
    end = start + round(seconds * 1e9)
    key = struct.Struct("I")
    writes = stamps = 0
    cpu_before = os.times()
    clock, sleep, push, pop = time.perf_counter_ns, time.sleep, heapq.heappush, heapq.heappop
    while True:
        now = clock()
        if now >= end:
            break
        while due_heap[0][0] <= now:  # every write due by now, as the simulator's heap does
            due, index = pop(due_heap)
            if mode != "idle":
                conn = conns[index]
                conn.send(CHUNK)
                if stamped:
                    try:
                        _, ancillary, _, _ = conn.recvmsg(1, 256, socket.MSG_ERRQUEUE)
                    except BlockingIOError:
                        pass
                    else:
                        if len(ancillary) >= 2 and len(ancillary[-1][2]) >= 16:
                            key.unpack_from(ancillary[-1][2], 12)
                            stamps += 1
            writes += 1
            push(due_heap, (due + gap_ns, index))
        # as asyncio's epoll_wait, whose timeout is rounded up to whole milliseconds
        wait = due_heap[0][0] - clock()
        if wait > 0:
            sleep(-(-wait // tick_ns) * tick_ns / 1e9)
    cpu_after = os.times()
    user = cpu_after.user - cpu_before.user
    cpu = user + cpu_after.system - cpu_before.system
    span = (clock() - start) / 1e9
    return {
        "writes_per_s": writes / span,
        "cpu": cpu / span,
        "us_per_write": cpu / writes * 1e6 if writes else float("nan"),
        "kernel_us_per_write": (cpu - user) / writes * 1e6 if writes else float("nan"),
        "stamped": stamps / writes if writes and stamped else float("nan"),
    }


def run_case(
    mode: str, streams: int, gap_ms: float, seconds: float, nap_ms: float, tick_us: int
) -> dict:
    listener = socket.create_server(("127.0.0.1", 0), backlog=streams)
    port = listener.getsockname()[1]
    client = multiprocessing.get_context("spawn").Process(
        target=read_all, args=(port, streams, seconds, nap_ms / 1000)
    )
    client.start()
    conns = []
    for _ in range(streams):
        conn, _ = listener.accept()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conns.append(conn)
    listener.close()
    try:
        return send_loop(conns, mode, round(gap_ms * 1e6), seconds, tick_us * 1000)
    finally:
        for conn in conns:
            conn.close()
        client.join(10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", default="64,256")
    parser.add_argument("--gap-ms", type=float, default=2.0)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--client-nap-ms", type=float, default=0.0)
    parser.add_argument("--tick-us", type=int, default=1000)
    args = parser.parse_args()
    print(
        f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, "
        f"{time.strftime('%Y-%m-%d %H:%M')}, gap {args.gap_ms:g} ms, "
        f"client nap {args.client_nap_ms:g} ms"
    )
    print(
        "| round | streams | sender | writes/s | sender CPU | us/write | of it kernel | stamped |"
    )
    print("|---:|---:|---|---:|---:|---:|---:|---:|")
    for round_index in range(1, args.rounds + 1):
        for streams in (int(s) for s in args.streams.split(",")):
            for mode in ("send", "send+stamp", "idle"):
                row = run_case(
                    mode, streams, args.gap_ms, args.seconds, args.client_nap_ms, args.tick_us
                )
                stamped = "" if math.isnan(row["stamped"]) else f"{row['stamped']:.1%}"
                print(
                    f"| {round_index} | {streams} | {mode} | {row['writes_per_s']:,.0f} | "
                    f"{row['cpu']:.0%} | {row['us_per_write']:.1f} | "
                    f"{row['kernel_us_per_write']:.1f} | {stamped} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
