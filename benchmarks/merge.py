"""Merge: the master's cost per worker report, and its CPU share for 100 workers.

Usage: python benchmarks/merge.py [--quick] [--workers 100] [--seconds 10] [--after 0]
                                  [--requests 100] [--tokens 250] [--classes 2]

A report is what a worker ships each second: one encoded delta (``wire_delta.encode_delta``;
here ``--requests`` finished requests of ``--tokens`` token events, ``--classes`` user
classes, every metric present: ~25k token gaps, a worker near capacity), inside Locust's
msgpack message with the worker's row (``report.worker_rows``, as of its deltas), read as
Locust's master reads it (``Message.unserialize``). ``--after S``: the reports of a worker
S seconds into its run (its first ones ship its whole kept tail of gaps; later ones only
the gaps new to it). Per report the master unpacks the message, decodes the delta
(``unpack_delta``: its format checked, then ``decode_delta``) and takes the row as it came
(``unpack_row``: bytes, read when the summary asks), and merges them as
``MasterLink._merge`` does (the pending interval, and
the worker's latest row; 20 workers in the timed loop, ``--workers`` in the CPU
loop); once a second it closes the interval (``Collector.tick``: add to totals, time-series
point, interval histogram log). Each memory variant (``common.VARIANTS``: as a run does,
and with the glibc mmap limit of an earlier workaround) runs in a fresh process. Columns:
  unpack/decode/add  microseconds per report, median (p99 for the sum)
  tick               milliseconds per closed interval (20 reports in it)
  N workers          a loop of --seconds simulated seconds, each with N reports and one
                     tick, timed by CPU time: the master's CPU share (100 % = one core)
  RSS                the process's resident memory at the end
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import msgpack
import numpy as np
from output import Table, base_parser, print_header
from synthetic import VARIANTS, apply_variant, encoded_deltas, rss_mb

REPORTS = 400


def unpack(packed):
    """What ``MasterLink._add_delta`` reads of a report: the delta and the row, checked."""
    from tpot_locust.harness.run.worker_deltas import unpack_delta, unpack_row

    return unpack_delta("worker", packed), unpack_row(packed)


def timed_us(function, *args):
    started = time.perf_counter_ns()
    result = function(*args)
    return result, (time.perf_counter_ns() - started) / 1000


def master_state(collector):
    """What ``MasterLink._merge`` reads and fills: the collector and each worker's latest
    row (before 2026-12-05: each worker's figures as buckets, ``by_worker``), as it came
    (since 2026-12-06: read when the summary asks)."""
    from tpot_locust.report.worker_rows import LatestRows

    return SimpleNamespace(collector=collector, rows=LatestRows(), names=str)


def with_every_cause(delta):
    """A busy delta as a run with every cause window has it: each group's ITL and TPOT
    copied as a part per cause, and its ITL as read delays (the largest row, the most
    work for the worker and for the master's check)."""
    from tpot_locust.metrics.causes import CAUSES, UNEXPLAINED
    from tpot_locust.metrics.histograms import add_into

    for metrics in delta.groups.values():
        for metric in ("itl", "tpot"):
            for cause in (*CAUSES, UNEXPLAINED):
                if f"{metric}@{cause}" not in metrics.histograms:  # ``@none``: all of it
                    add_into(metrics.merged_into(f"{metric}@{cause}"), metrics.histogram(metric))
        add_into(metrics.merged_into("read_delay"), metrics.histogram("itl"))
    return delta


def rows_of(deltas) -> tuple[list[dict], dict]:
    """The worker's row as of each of its deltas (every cause present), as ``WorkerLink``
    makes them, cooperatively; and its cost per report (median us): adding the delta to its
    figures, making the row, and the longest piece between two yields."""
    from tpot_locust.common.cooperation import WorkSlices, use_yield
    from tpot_locust.metrics.wire_delta import decode_delta
    from tpot_locust.metrics.worker_figures import WorkerFigures
    from tpot_locust.report.worker_rows import worker_row

    pieces = [0]
    last = [time.perf_counter_ns()]

    def pause() -> None:
        now = time.perf_counter_ns()
        pieces.append(now - last[0])
        last[0] = now

    use_yield(pause)
    figures, rows, cost = WorkerFigures(), [], {"add": [], "row": [], "piece": []}
    for number in range(REPORTS // 10):
        delta = with_every_cause(decode_delta(deltas[number % len(deltas)]).to_metric_set())
        pieces[:] = [0]
        last[0] = time.perf_counter_ns()
        slices = WorkSlices()  # as ``worker_deltas.WorkerDeltas.take``
        cost["add"].append(timed_us(figures.add, delta, slices.after_item)[1])
        row, row_us = timed_us(worker_row, figures, slices.after_item)
        pieces.append(time.perf_counter_ns() - last[0])
        cost["row"].append(row_us)
        cost["piece"].append(max(pieces) / 1000)
        if number < len(deltas):
            rows.append(row)
    use_yield(lambda: None)
    return rows, {name: float(np.median(values)) for name, values in cost.items()}


def measure(args) -> dict:
    """One variant, in this (fresh) process."""
    from locust.rpc.protocol import Message

    from tpot_locust.common.results_folder import ResultsFolder
    from tpot_locust.harness.run.distributed import DELTA_KEY, MasterLink
    from tpot_locust.harness.run.worker_deltas import pack_delta
    from tpot_locust.metrics.collector import Collector
    from tpot_locust.metrics.metric_set import MetricSet

    apply_variant(args.variant)
    classes = [f"class{i}" for i in range(args.classes)]
    deltas = encoded_deltas(8, args.tokens, args.requests, classes, after=args.after)
    # as a worker's report carries it (harness.run.worker_deltas.pack_delta, its metrics encoded)
    rows, worker_cost = rows_of(deltas)
    packed = [
        pack_delta(MetricSet(), row) | {"metrics": delta}
        for delta, row in zip(deltas, rows, strict=True)
    ]
    messages = [Message("stats", {"stats": {}, DELTA_KEY: p}, "worker").serialize() for p in packed]
    groups = [group for d in deltas for group in d["groups"].values()]
    result: dict = {
        "bytes": float(np.mean([len(m) for m in messages])),
        "tail_bytes": float(np.mean([len(msgpack.packb(g["tail_gaps"])) for g in groups]))
        * len(classes),
        "histograms": len(deltas[0]["histograms"]["names"]),
        "row_bytes": float(np.mean([len(msgpack.packb(row)) for row in rows])),
        "worker": worker_cost,
    }
    with tempfile.TemporaryDirectory(prefix="tpot-merge-") as folder:
        collector = Collector()
        collector.start(ResultsFolder(Path(folder)))
        master = master_state(collector)
        steps: dict[str, list[float]] = {"unpack": [], "decode": [], "add": [], "tick": []}
        for number in range(REPORTS):
            message, unpack_us = timed_us(Message.unserialize, messages[number % len(messages)])
            data = message.data
            (delta, row), decode_us = timed_us(unpack, data[DELTA_KEY])
            _, add_us = timed_us(MasterLink._merge, master, f"w{number % 20}", delta, row)
            steps["unpack"].append(unpack_us)
            steps["decode"].append(decode_us)
            steps["add"].append(add_us)
            if number % 20 == 19:
                steps["tick"].append(timed_us(collector.tick, 64)[1])
        collector.close()
    for name, values in steps.items():
        result[name] = float(np.median(values))
    total = np.add(np.add(steps["unpack"], steps["decode"]), steps["add"])
    result["report_p99"] = float(np.percentile(total, 99))

    with tempfile.TemporaryDirectory(prefix="tpot-merge-") as folder:
        collector = Collector()
        collector.start(ResultsFolder(Path(folder)))
        master = master_state(collector)
        cpu0 = time.process_time()
        for second in range(args.seconds):
            for worker in range(args.workers):
                data = Message.unserialize(messages[(second + worker) % len(messages)]).data
                delta, row = unpack(data[DELTA_KEY])
                MasterLink._merge(master, f"worker{worker}", delta, row)
            collector.tick(args.workers)
        result["cpu_share"] = (time.process_time() - cpu0) / args.seconds
        collector.close()
    result["rss"] = rss_mb()
    return result


def main() -> None:
    parser = base_parser(__doc__)
    parser.add_argument("--workers", type=int, default=100)
    parser.add_argument("--seconds", type=int, default=10, help="simulated seconds")
    parser.add_argument("--requests", type=int, default=100, help="requests per delta")
    parser.add_argument("--tokens", type=int, default=250, help="token events per request")
    parser.add_argument("--classes", type=int, default=2, help="user classes per delta")
    parser.add_argument(
        "--after", type=int, default=0, help="reports of a worker this many seconds into its run"
    )
    parser.add_argument("--variant", choices=VARIANTS, help="(internal) measure one variant")
    args = parser.parse_args()
    if args.quick:
        args.seconds = 3
    if args.variant:
        print(json.dumps(measure(args)))
        return
    rows = []
    for variant in VARIANTS:
        command = [
            sys.executable,
            __file__,
            "--variant",
            variant,
            "--workers",
            str(args.workers),
            "--seconds",
            str(args.seconds),
            "--requests",
            str(args.requests),
            "--tokens",
            str(args.tokens),
            "--classes",
            str(args.classes),
            "--after",
            str(args.after),
        ]
        output = subprocess.run(command, check=True, capture_output=True, text=True).stdout
        rows.append((variant, json.loads(output.splitlines()[-1])))
    first = rows[0][1]
    print_header(
        "merge: master cost per worker report",
        [
            f"one delta: {args.requests} requests x {args.tokens} token events "
            f"({args.requests * (args.tokens - 1):,} gaps), {args.classes} classes, "
            f"{first['histograms']} histograms, {first['bytes']:,.0f} bytes as a msgpack "
            f"message ({first['tail_bytes']:,.0f} of them the new tail gaps, "
            f"{first['row_bytes']:,.0f} the worker's row), a worker "
            f"{args.after} s into its run; {REPORTS} reports, a tick every 20",
            f"the worker, per report (every cause present): its figures "
            f"{first['worker']['add']:,.0f} us, its row {first['worker']['row']:,.0f} us, "
            f"the longest piece between yields {first['worker']['piece']:,.0f} us (medians)",
        ],
    )
    table = Table(
        [
            "variant",
            "unpack us",
            "decode us",
            "add us",
            "report us",
            "report p99 us",
            "tick ms",
            f"{args.workers} workers: CPU share",
            "RSS MB",
        ]
    )
    for variant, r in rows:
        report = r["unpack"] + r["decode"] + r["add"]
        table.row(
            variant,
            r["unpack"],
            r["decode"],
            r["add"],
            report,
            r["report_p99"],
            r["tick"] / 1000,
            f"{100 * r['cpu_share']:.1f}%",
            r["rss"],
        )


if __name__ == "__main__":
    main()
