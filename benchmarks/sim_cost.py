"""The simulator's own CPU per token event, with its truth (kernel transmit stamps) on.

Usage: python benchmarks/sim_cost.py [--streams 64,256] [--gap-ms 2] [--tokens 200]
                                     [--seconds 6] [--rounds 1] [--server independent|engine]

The simulator runs in its own process with ``--truth`` (every token's departure read from
the kernel's transmit stamps); this process keeps ``--streams`` keep-alive streams busy
with raw non-blocking sockets and epoll, counting bytes only (``sim_engine.drive``): by
default each socket is read as soon as it is ready, as a real client reads, which costs
the simulator the receiver's wake-ups on loopback; ``--client-nap-ms 4`` reads in batches. Over a
window (the first second skipped) the simulator's CPU time (``/proc/PID/stat``, user and
kernel) is divided by the token events its truth recorded inside the window: the cost
that the 2-core quickstart's simulator pays. Also printed: the share of those events
stamped by the kernel (the rest keep the loop's stamp: a write TCP held back), and "others",
CPUs kept busy by anything else meanwhile (on a shared machine, read the rows in one
sitting against each other). Run a before tree with ``PYTHONPATH`` pointing at it.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

from sim_engine import ZEROED, drive

from tpot_locust.sim.process import cpu_seconds, machine_busy_seconds, start_simulator
from tpot_locust.sim.truth import read_truth


def run_case(
    streams: int, gap_ms: float, tokens: int, seconds: float, server: str, nap_ms: float, tmp: Path
) -> dict[str, float]:
    """One simulator, ``streams`` streams for a warm-up second and ``seconds`` measured."""
    truth_path = tmp / f"truth-{streams}-{time.monotonic_ns()}.jsonl"
    if server == "engine":
        args = ["--profile", "h200-llama3-8b", "--set", f"step_base_ms={gap_ms:g}"]
        for key in ZEROED:
            args += ["--set", f"{key}=0"]
    else:
        args = ["--gap-ms", f"{gap_ms:g}", "--ttft-ms", f"{gap_ms:g}"]
    window: dict[str, float] = {}
    with start_simulator(*args, "--seed", "1", truth=truth_path) as sim:
        pid = sim.process.pid

        def mark(name: str) -> None:
            window[name + "_cpu"] = cpu_seconds(pid)
            window[name + "_own"] = cpu_seconds(os.getpid())
            window[name + "_busy"] = machine_busy_seconds()
            window[name + "_wall"] = time.time_ns()

        warm = 1.0
        timers = [
            threading.Timer(warm, mark, args=("start",)),
            threading.Timer(warm + seconds, mark, args=("stop",)),
        ]
        for timer in timers:
            timer.start()
        drive(
            sim.host,
            sim.port,
            streams,
            warm + seconds + 0.2,
            max_tokens=tokens,
            nap_s=nap_ms / 1000,
        )
        for timer in timers:
            timer.join()
    lo, hi = window["start_wall"], window["stop_wall"]
    events = kernel = writes = 0
    for record in read_truth(truth_path):
        stamps = record.get("send_ns") or []
        inside = sum(1 for stamp in stamps if lo <= stamp <= hi)
        events += inside
        writes += len(
            {stamp for stamp in stamps if lo <= stamp <= hi}
        )  # a write's events share one
        if inside and record.get("kernel_sends", 0) == len(stamps):
            kernel += inside
    span = (hi - lo) / 1e9
    cpu = window["stop_cpu"] - window["start_cpu"]
    own = window["stop_own"] - window["start_own"]
    busy = window["stop_busy"] - window["start_busy"]
    return {
        "events_per_s": events / span,
        "sim_cpu": cpu / span,
        "us_per_event": cpu / events * 1e6 if events else float("nan"),
        "us_per_write": cpu / writes * 1e6 if writes else float("nan"),
        "events_per_write": events / writes if writes else float("nan"),
        "kernel_share": kernel / events if events else float("nan"),
        "others": max(0.0, busy - cpu - own) / span,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", default="64,256")
    parser.add_argument("--gap-ms", type=float, default=2.0)
    parser.add_argument("--tokens", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--client-nap-ms", type=float, default=0.0)
    parser.add_argument("--server", choices=("independent", "engine"), default="independent")
    args = parser.parse_args()
    print(
        f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, "
        f"{time.strftime('%Y-%m-%d %H:%M')}, {args.server}, gap {args.gap_ms:g} ms, "
        f"answers of {args.tokens} tokens, client nap {args.client_nap_ms:g} ms"
    )
    print(
        "| streams | events/s | sim CPU | us/event | events/write | us/write | kernel-stamped "
        "| others |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.rounds):
            for streams in (int(s) for s in args.streams.split(",")):
                row = run_case(
                    streams,
                    args.gap_ms,
                    args.tokens,
                    args.seconds,
                    args.server,
                    args.client_nap_ms,
                    Path(tmp),
                )
                print(
                    f"| {streams} | {row['events_per_s']:,.0f} | {row['sim_cpu']:.0%} | "
                    f"{row['us_per_event']:.1f} | {row['events_per_write']:.2f} | "
                    f"{row['us_per_write']:.1f} | {row['kernel_share']:.1%} | "
                    f"{row['others']:.0%} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
