"""Merge: the master's cost per worker report, and its CPU share for 100 workers.

Usage: python benchmarks/merge.py [--quick] [--workers 100] [--seconds 10]
                                  [--requests 100] [--tokens 250] [--classes 2]

A report is what a worker ships each second: one encoded ``MetricSet`` delta (here
``--requests`` finished requests of ``--tokens`` token events, ``--classes`` user classes,
every metric present: ~25k token gaps, a worker near capacity), inside Locust's msgpack
message. Per report the master unpacks the message, decodes the delta
(``MetricSet.decode``) and adds it to its pending interval (``Collector.add_delta``); once
a second it closes the interval (``Collector.tick``: add to totals, time-series point,
interval histogram log). Table 1: microseconds per step (median and p99 over many reports).
Table 2: a loop of ``--seconds`` simulated seconds, each with ``--workers`` reports and one
tick, timed by CPU time: the master's CPU share (100 % = one core busy).
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import msgpack
import numpy as np
from common import Table, base_parser, encoded_deltas, print_header

from tpot_locust.collector import Collector
from tpot_locust.recorder import MetricSet


def timed_us(function, *args):
    started = time.perf_counter_ns()
    result = function(*args)
    return result, (time.perf_counter_ns() - started) / 1000


def main() -> None:
    parser = base_parser(__doc__)
    parser.add_argument("--workers", type=int, default=100)
    parser.add_argument("--seconds", type=int, default=10, help="simulated seconds")
    parser.add_argument("--requests", type=int, default=100, help="requests per delta")
    parser.add_argument("--tokens", type=int, default=250, help="token events per request")
    parser.add_argument("--classes", type=int, default=2, help="user classes per delta")
    args = parser.parse_args()
    if args.quick:
        args.seconds = 3
    classes = [f"class{i}" for i in range(args.classes)]
    deltas = encoded_deltas(8, args.tokens, args.requests, classes)
    messages = [msgpack.packb({"stats": {}, "tpot_locust": d}) for d in deltas]
    histograms = sum(len(c["histograms"]) for c in deltas[0].values())
    print_header(
        "merge: master cost per worker report",
        [f"one delta: {args.requests} requests x {args.tokens} token events "
         f"({args.requests * (args.tokens - 1):,} gaps), {args.classes} classes, "
         f"{histograms} histograms, {np.mean([len(m) for m in messages]):,.0f} bytes "
         "as a msgpack message"],
    )  # fmt: skip

    with tempfile.TemporaryDirectory(prefix="tpot-merge-") as folder:
        collector = Collector()
        collector.start(Path(folder))
        steps: dict[str, list[float]] = {"unpack": [], "decode": [], "add": [], "tick": []}
        for number in range(400):
            message = messages[number % len(messages)]
            data, unpack_us = timed_us(msgpack.unpackb, message)
            delta, decode_us = timed_us(MetricSet.decode, data["tpot_locust"])
            _, add_us = timed_us(collector.add_delta, delta)
            steps["unpack"].append(unpack_us)
            steps["decode"].append(decode_us)
            steps["add"].append(add_us)
            if number % 20 == 19:
                steps["tick"].append(timed_us(collector.tick, 64)[1])
        table = Table(["step", "median us", "p99 us", "per"])
        for name, values in steps.items():
            table.row(name, float(np.median(values)), float(np.percentile(values, 99)),
                      "second (20 reports)" if name == "tick" else "report")  # fmt: skip
        per_report = sum(float(np.median(steps[s])) for s in ("unpack", "decode", "add"))
        table.row("**report total**", per_report, "-", "report")
        collector.close()
    print()

    with tempfile.TemporaryDirectory(prefix="tpot-merge-") as folder:
        collector = Collector()
        collector.start(Path(folder))
        cpu0, wall0 = time.process_time(), time.perf_counter()
        for second in range(args.seconds):
            for worker in range(args.workers):
                data = msgpack.unpackb(messages[(second + worker) % len(messages)])
                collector.add_delta(MetricSet.decode(data["tpot_locust"]))
            collector.tick(args.workers)
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
        collector.close()
    table = Table(["workers", "reports/s", "CPU ms per second of run", "master CPU share",
                   "wall ms per second"])  # fmt: skip
    table.row(args.workers, args.workers, cpu / args.seconds * 1000,
              f"{100 * cpu / args.seconds:.1f}%", wall / args.seconds * 1000)  # fmt: skip


if __name__ == "__main__":
    main()
