"""Speed of the simulator's engine mode: token events/s on one core, and step timing lateness.

Usage: python benchmarks/sim_engine.py [--streams 64,256] [--step-ms 5,2,1,0.5] [--seconds 4]
[--timer-lead-us 1000]

The simulator runs in its own process with the h200-llama3-8b profile made into a fixed step
time (every cost key but ``step_base_ms`` set to 0, no jitter, no stalls), so N streams get N
token events per step. This process keeps N keep-alive streams busy (max_tokens 2000,
ignore_eos) with raw non-blocking sockets and epoll, reading every 4 ms (in batches, so it
needs little CPU), and only counts bytes. From the step log
of the measured window (the first second is skipped) it prints token events/s, the
simulator's CPU use (its utime + stime over the window), the lateness of each step's first
write (``sent_ns``) and last write (``done_ns``) behind the step's scheduled end
(``end_ns``), and "others": CPUs kept busy by anything but the simulator and this client
meanwhile (on a shared VM the figures mean little when that is high; pinning the processes
to CPUs made the tail worse there). No pass/fail: the summary names, per stream count, the
fastest step time whose first-write lateness stayed within 0.2 ms at p99 with the simulator
under 95 % of a core.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path

from tpot_locust.sim.process import cpu_seconds, machine_busy_seconds, start_simulator
from tpot_locust.sim.truth import read_truth

TERMINATOR = b"\r\n0\r\n\r\n"
CLIENT_NAP_S = 0.004
ZEROED = (
    "decode_ms_per_seq",
    "kv_read_ms_per_ktoken",
    "prefill_ms_per_token",
    "prefill_attn_ms_per_mpair",
    "step_jitter",
    "stall_prob",
    "frontend_ms",
)


def request_bytes(index: int, number: int, max_tokens: int = 2000) -> bytes:
    body = json.dumps(
        {
            "model": "tpot-sim",
            "stream": True,
            "max_tokens": max_tokens,
            "ignore_eos": True,
            "messages": [{"role": "user", "content": "hello " * 32}],
        }
    ).encode()
    head = (
        "POST /v1/chat/completions HTTP/1.1\r\nHost: sim\r\nContent-Type: application/json\r\n"
        f"X-Request-Id: b{index}-{number}\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


def drive(
    host: str,
    port: int,
    streams: int,
    seconds: float,
    max_tokens: int = 2000,
    nap_s: float = CLIENT_NAP_S,
) -> dict[str, float]:
    """Keep ``streams`` requests in flight for ``seconds``; returns client-side counts.
    ``nap_s`` 0: each socket read as soon as it is ready (as a real client does)."""
    poller = select.epoll()
    socks: dict[int, socket.socket] = {}
    tails: dict[int, bytes] = {}
    numbers: dict[int, int] = {}
    for index in range(streams):
        sock = socket.create_connection((host, port))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.sendall(request_bytes(index, 0, max_tokens))
        sock.setblocking(False)
        fd = sock.fileno()
        socks[fd], tails[fd], numbers[fd] = sock, b"", index * 1_000_000
        poller.register(fd, select.EPOLLIN)
    received = events = completed = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if nap_s:
            time.sleep(nap_s)  # read in batches: the client must not starve the server
        for fd, _ in poller.poll(0.05):
            try:
                data = socks[fd].recv(1 << 18)
            except BlockingIOError:
                continue
            if not data:
                raise RuntimeError("simulator closed a stream")
            received += len(data)
            events += data.count(b"data: ")
            tail = (tails[fd] + data)[-len(TERMINATOR) :]
            tails[fd] = tail
            if tail == TERMINATOR:  # response complete: next request on the same connection
                completed += 1
                numbers[fd] += 1
                tails[fd] = b""
                socks[fd].setblocking(True)
                socks[fd].sendall(request_bytes(fd, numbers[fd], max_tokens))
                socks[fd].setblocking(False)
    for sock in socks.values():
        sock.close()
    poller.close()
    return {"bytes": received, "events": events, "completed": completed}


def percentile(values: list[int], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def run_case(streams: int, step_ms: float, seconds: float, lead_us: int, tmp: Path) -> dict:
    steps_path = tmp / f"steps-{streams}-{step_ms}.jsonl"
    args = [
        "--profile",
        "h200-llama3-8b",
        "--steps",
        str(steps_path),
        "--timer-lead-us",
        str(lead_us),
        "--set",
        f"step_base_ms={step_ms}",
    ]
    for key in ZEROED:
        args += ["--set", f"{key}=0"]
    with start_simulator(*args) as sim:
        pid = sim.process.pid
        warm = 1.0
        window: dict[str, float] = {}

        def mark(name: str) -> None:
            window[name + "_cpu"] = cpu_seconds(pid)
            window[name + "_own"] = cpu_seconds(os.getpid())
            window[name + "_busy"] = machine_busy_seconds()
            window[name + "_wall"] = time.time_ns()

        client_start = time.monotonic()
        # One drive covers warm-up and window; timer threads sample the simulator's CPU time.
        timer = threading.Timer(warm, mark, args=("start",))
        timer.start()
        stop_timer = threading.Timer(warm + seconds, mark, args=("stop",))
        stop_timer.start()
        client = drive(sim.host, sim.port, streams, warm + seconds + 0.2)
        timer.join()
        stop_timer.join()
        elapsed = time.monotonic() - client_start
    steps = [r for r in read_truth(steps_path) if r.get("type") == "step"]
    lo, hi = window["start_wall"], window["stop_wall"]
    inside = [s for s in steps if lo <= s["end_ns"] <= hi]
    span = (hi - lo) / 1e9
    late = [s["sent_ns"] - s["end_ns"] for s in inside]
    last = [s["done_ns"] - s["end_ns"] for s in inside]
    emitted = sum(s["emitted"] for s in inside)
    cpu = (window["stop_cpu"] - window["start_cpu"]) / span
    own = (window["stop_own"] - window["start_own"]) / span
    busy = (window["stop_busy"] - window["start_busy"]) / span
    return {
        "streams": streams,
        "step_ms": step_ms,
        "events_per_s": emitted / span,
        "sim_cpu": cpu,
        "events_per_cpu_s": emitted / span / cpu if cpu else float("nan"),
        "late_p50_ms": percentile(late, 0.5) / 1e6,
        "late_p99_ms": percentile(late, 0.99) / 1e6,
        "late_max_ms": max(late) / 1e6 if late else float("nan"),
        "last_write_p99_ms": percentile(last, 0.99) / 1e6,
        "reanchored": sum(1 for s in inside if s["lag_ns"]),
        "steps": len(inside),
        "client_events_per_s": client["events"] / elapsed,
        "other_cpu": max(0.0, busy - cpu - own),  # CPUs used by everything else meanwhile
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", default="64,256")
    parser.add_argument("--step-ms", default="5,2,1,0.5")
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--timer-lead-us", type=int, default=1000)
    args = parser.parse_args()
    header = (
        f"{'streams':>7} {'step ms':>7} {'events/s':>9} {'sim CPU':>7} {'ev/CPU-s':>9} "
        f"{'late p50':>8} {'p99':>6} {'max':>6} {'last p99':>8} {'re-anch':>7} "
        f"{'others':>6}"
    )
    print(
        f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, "
        f"{time.strftime('%Y-%m-%d %H:%M')}; lateness in ms"
    )
    print(header)
    best: dict[int, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for streams in (int(s) for s in args.streams.split(",")):
            for step_ms in (float(s) for s in args.step_ms.split(",")):
                row = run_case(streams, step_ms, args.seconds, args.timer_lead_us, Path(tmp))
                print(
                    f"{streams:7d} {step_ms:7.2f} {row['events_per_s']:9.0f} "
                    f"{row['sim_cpu']:6.0%} {row['events_per_cpu_s']:9.0f} "
                    f"{row['late_p50_ms']:8.3f} {row['late_p99_ms']:6.3f} "
                    f"{row['late_max_ms']:6.2f} {row['last_write_p99_ms']:8.3f} "
                    f"{row['reanchored']:7d} {row['other_cpu']:6.0%}",
                    flush=True,
                )
                if row["late_p99_ms"] <= 0.2 and row["sim_cpu"] < 0.95:
                    if row["events_per_s"] > best.get(streams, {}).get("events_per_s", 0):
                        best[streams] = row
    for streams, row in best.items():
        print(
            f"{streams} streams: {row['events_per_s']:.0f} token events/s sustained "
            f"(step {row['step_ms']} ms, sim CPU {row['sim_cpu']:.0%}, "
            f"first-write lateness p99 {row['late_p99_ms']:.3f} ms)"
        )


if __name__ == "__main__":
    main()
