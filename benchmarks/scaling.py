"""Scaling: tokens/s held with 1, 2 and 4 worker processes on this machine.

Usage: python benchmarks/scaling.py [--quick] [--workers 1,2,4] [--users 64] [--gap-ms 2]
                                    [--tokens 400] [--seconds 20]

Each row is one ``python -m tpot_locust run scenarios/quickstart.yaml --workers N`` (a
master, N local worker processes and the embedded simulator, all on this machine) with
``--set`` overrides: ``--users`` closed-loop users, one turn, no think time, ``--tokens``
output tokens, the simulator at ``--gap-ms`` with a 5 ms TTFT, 3 s warm-up excluded.
Columns:
  asked/s       users x 1000 / gap: token events/s the users would take from a fast server
  tokens/s      ``summary.json`` ``tokens.per_s`` (output tokens / the run's window)
  TPOT p99      measured / true (truth.jsonl, requests that arrived after the warm-up), ms
  coal.         gaps < 0.1 ms: measured | in the truth (the simulator sent them together)
  machine CPU   all cores busy (user + system) during the run; 100 % = every core
The simulator is one asyncio process: it saturates one core at ~25-30k token events/s
whatever the worker count, and on a machine with few cores the workers, the master and the
simulator share them: more workers than free cores cannot add throughput.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from output import Table, base_parser, parse_list, print_header

from tpot_locust.common.timings import to_us
from tpot_locust.metrics.histograms import (
    add_into,
    count_below,
    decode_histogram,
    histogram_stats,
    new_histogram,
    record_many,
)
from tpot_locust.sim.truth import read_truth

ROOT = Path(__file__).resolve().parents[1]
WARMUP_S = 3


def cpu_ticks() -> tuple[int, int]:
    """(busy, total) jiffies of all cores, from /proc/stat."""
    fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = fields[3] + fields[4]
    return sum(fields) - idle, sum(fields)


def truth_stats(path: Path) -> tuple[float, float]:
    """True TPOT p99 (ms) and coalesced fraction over requests after the warm-up."""
    records = [r for r in read_truth(path) if not r.get("aborted") and len(r["send_ns"]) > 1]
    if not records:
        return float("nan"), float("nan")
    start = min(r["arrival_ns"] for r in records)
    histogram = new_histogram()
    gaps = [
        np.diff(np.asarray(r["send_ns"], dtype=np.int64))
        for r in records
        if r["arrival_ns"] >= start + WARMUP_S * 1e9
    ]
    if gaps:
        record_many(histogram, to_us(np.concatenate(gaps)))
    stats = histogram_stats(histogram, (99.0,))
    total = histogram.total_count or 1
    return stats.percentiles[99.0] / 1000, count_below(histogram, 100) / total


def run_one(workers: int, args, out: Path) -> dict:
    command = [
        sys.executable,
        "-m",
        "tpot_locust",
        "run",
        str(ROOT / "scenarios" / "quickstart.yaml"),
        "--workers",
        str(workers),
        "--out",
        str(out),
        "--set",
        f"classes.chat.users={args.users}",
        "--set",
        f"spawn_rate={args.users}",
        "--set",
        "classes.chat.turns=1",
        "--set",
        "classes.chat.think_time=0",
        "--set",
        "classes.chat.prompt_tokens=32",
        "--set",
        f"classes.chat.output_tokens={args.tokens}",
        "--set",
        f"simulator.gap_ms={args.gap_ms}",
        "--set",
        "simulator.ttft_ms=5",
        "--set",
        f"duration={args.seconds}s",
        "--set",
        f"warmup={WARMUP_S}s",
    ]
    busy0, total0 = cpu_ticks()
    started = time.perf_counter()
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - started
    busy1, total1 = cpu_ticks()
    summary_path = out / "summary.json"
    if not summary_path.exists():
        raise SystemExit(f"run with {workers} workers failed:\n{result.stdout}\n{result.stderr}")
    summary = json.loads(summary_path.read_text())
    true_p99, true_coalesced = truth_stats(out / "truth.jsonl")
    tpot = summary["metrics"]["tpot"]
    coalesced = float("nan")
    histograms_path = out / "histograms.json"
    if histograms_path.exists():
        coalesced = measured_coalesced(json.loads(histograms_path.read_text()))
    return {
        "tokens_per_s": summary["tokens"]["per_s"],
        "p99": tpot.get("p99", float("nan")),
        "true_p99": true_p99,
        "coalesced": coalesced,
        "true_coalesced": true_coalesced,
        "machine_cpu": (busy1 - busy0) / max(total1 - total0, 1),
        "wall": wall,
        "complete": summary.get("complete"),
        "failed": summary["requests"]["failed"],
    }


def measured_coalesced(histograms: dict) -> float:
    """Fraction of measured TPOT samples < 0.1 ms, all classes (``histograms.json``)."""
    total = new_histogram()
    for metrics in histograms.get("classes", {}).values():
        blob = metrics.get("histograms", {}).get("tpot")
        if blob:
            add_into(total, decode_histogram(blob))
    if not total.total_count:
        return float("nan")
    return count_below(total, 100) / total.total_count


def main() -> None:
    parser = base_parser(__doc__)
    parser.add_argument("--workers", default="1,2,4", help="worker process counts")
    parser.add_argument("--users", type=int, default=64)
    parser.add_argument("--gap-ms", type=float, default=2.0)
    parser.add_argument("--tokens", type=int, default=400)
    parser.add_argument("--seconds", type=int, default=20)
    args = parser.parse_args()
    if args.quick:
        args.workers, args.users, args.seconds = "1,2", 32, 6
    cores = os.cpu_count()
    print_header(
        f"scaling: tokens/s with N worker processes on this {cores}-core machine",
        [
            f"{args.users} users, {args.tokens} tokens, simulator gap {args.gap_ms:g} ms, "
            f"{args.seconds} s runs ({WARMUP_S} s warm-up); master + workers + simulator all "
            f"share these {cores} cores"
        ],
    )
    table = Table(
        [
            "workers",
            "cores",
            "asked/s",
            "tokens/s",
            "TPOT p99 meas/true",
            "coal. meas|truth",
            "machine CPU",
            "failed",
            "complete",
        ]
    )
    asked = args.users * 1000 / args.gap_ms
    for workers in parse_list(args.workers):
        with tempfile.TemporaryDirectory(prefix="tpot-scaling-") as folder:
            row = run_one(workers, args, Path(folder) / "out")
        table.row(
            workers,
            cores,
            f"{asked:,.0f}",
            f"{row['tokens_per_s']:,.0f}",
            f"{row['p99']:.3f} / {row['true_p99']:.3f}",
            f"{100 * row['coalesced']:.1f}% \\| {100 * row['true_coalesced']:.1f}%",
            f"{100 * row['machine_cpu']:.0f}%",
            row["failed"],
            str(row["complete"]),
        )


if __name__ == "__main__":
    main()
