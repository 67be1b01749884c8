"""Memory: RSS of a worker after recording 1e5, 1e6 and 1e7 token gaps, and of a master.

Usage: python benchmarks/memory.py [--quick] [--tokens 500] [--gaps 1e5,1e6,1e7]

Worker: one fresh process feeds synthetic finished requests (``RequestTimings`` with
``--tokens`` token events, log-normal gaps around 5 ms, two classes) through
``Recorder.record`` and ships a delta (``take_interval`` + ``encode_delta``) every 100 requests,
as a worker does every second. Master: one fresh process decodes encoded deltas (a pool of
real ones, two classes with all metrics) into a ``Collector`` and ticks it (totals, time
series point; no interval log files) once per 4 deltas, as for 4 workers reporting each
second. RSS is ``VmRSS`` from ``/proc/self/status`` at each checkpoint, ``VmHWM`` the
peak so far. Histograms have a fixed size (~190 KB each: 1 us..1 h at 3 digits; ~2.3 MB
per class for all metrics), so RSS must stay flat from 1e5 to 1e7 gaps, where a list of
values would grow by ~8 bytes per gap (~80 MB at 1e7).

Each part runs once per memory variant (``common.VARIANTS``), in a fresh process:
  as is                     what a run does (the histogram <-> encoder cycle broken)
  mmap limit                plus glibc's mmap threshold at 128 KiB (an earlier workaround)
Finding (2026-11-29, fixed since in ``tpot_locust.metrics.histograms``): each ``HdrHistogram``
references itself through its encoder
(``histogram.encoder.histogram``), so a dropped one (every delta decoded, every interval
swapped out, every ``combined()``) waits for Python's cyclic garbage collector, with its
~190 KB counts array: RSS climbs by hundreds of them between full collections (``histogram
objects`` = alive or awaiting collection; ``RSS after gc`` = after ``gc.collect()``). With
the cycle broken they are freed at once and RSS stays flat.

Phase tagging holds each request's gaps for ``TAG_HOLD_S`` (2 s of wall time) before
bucketing them, so a worker holds rate x 2 s x ~40 bytes (~2 MB at 25k events/s). This
synthetic loop records ~1M gaps/s, which would hold ~80 MB for no real reason, so the hold
is set to 0 here; the table's note gives the held size at the capacity rate.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from output import Table, base_parser, parse_list, print_header
from synthetic import VARIANTS, apply_variant, encoded_deltas, synthetic_timings

REPORT_EVERY = 100  # requests per shipped delta


def proc_status_mb() -> tuple[float, float]:
    values = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        name, _, rest = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            values[name] = int(rest.split()[0]) / 1024
    return values["VmRSS"], values["VmHWM"]


def checkpoint_line(gaps: int, started: float) -> str:
    """gaps, RSS, peak, seconds, histograms alive, RSS after a full collection."""
    import gc

    from hdrh.histogram import HdrHistogram

    rss, hwm = proc_status_mb()
    elapsed = time.perf_counter() - started
    alive = sum(1 for o in gc.get_objects() if isinstance(o, HdrHistogram))
    gc.collect()
    after, _ = proc_status_mb()
    return f"{gaps} {rss:.1f} {hwm:.1f} {elapsed:.1f} {alive} {after:.1f}"


def worker_part(checkpoints: list[int], tokens: int) -> None:
    import tpot_locust.metrics.recorder
    from tpot_locust.metrics.recorder import Recorder
    from tpot_locust.metrics.wire_delta import encode_delta

    tpot_locust.metrics.recorder.TAG_HOLD_S = 0.0  # see the module's docstring

    rng = np.random.default_rng(1)
    recorder = Recorder()
    rss0, _ = proc_status_mb()
    print(f"start {rss0:.1f} -", flush=True)
    gaps = 0
    index = 0
    started = time.perf_counter()
    for checkpoint in checkpoints:
        while gaps < checkpoint:
            timings = synthetic_timings(rng, index, tokens, ("chat", "arrivals")[index % 2])
            recorder.record(timings)
            gaps += tokens - 1
            index += 1
            if index % REPORT_EVERY == 0:
                encode_delta(recorder.take_interval())
        encode_delta(recorder.take_interval(final=True))
        print(checkpoint_line(gaps, started), flush=True)


def master_part(checkpoints: list[int], tokens: int) -> None:
    from tpot_locust.metrics.collector import Collector
    from tpot_locust.metrics.wire_delta import decode_delta

    deltas = encoded_deltas(10, tokens, REPORT_EVERY)
    gaps_per_delta = REPORT_EVERY * (tokens - 1)
    collector = Collector()
    collector.start(None)
    rss0, _ = proc_status_mb()
    print(f"start {rss0:.1f} -", flush=True)
    merged = 0
    started = time.perf_counter()
    for checkpoint in checkpoints:
        while merged * gaps_per_delta < checkpoint:
            collector.add_delta(decode_delta(deltas[merged % len(deltas)]))
            merged += 1
            if merged % 4 == 0:  # four workers' reports per tick
                collector.tick(users=64)
        print(checkpoint_line(merged * gaps_per_delta, started), flush=True)


def run_part(part: str, checkpoints: list[int], tokens: int, variant: str) -> list[list[str]]:
    command = [
        sys.executable,
        __file__,
        "--part",
        part,
        "--tokens",
        str(tokens),
        "--gaps",
        ",".join(str(c) for c in checkpoints),
        "--variant",
        variant,
    ]
    output = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    return [line.split() for line in output.splitlines() if line.strip()]


def main() -> None:
    parser = base_parser(__doc__)
    parser.add_argument("--tokens", type=int, default=500, help="token events per request")
    parser.add_argument("--gaps", default="1e5,1e6,1e7", help="checkpoints, gaps recorded")
    parser.add_argument("--part", choices=("worker", "master"), help=argparse_hidden())
    parser.add_argument("--variant", choices=VARIANTS, help=argparse_hidden())
    args = parser.parse_args()
    if args.part:
        apply_variant(args.variant or VARIANTS[0])
    checkpoints = [int(float(c)) for c in parse_list(args.gaps, str)]
    if args.quick and not args.part:
        checkpoints = [c for c in checkpoints if c <= 1_000_000]
    if args.part == "worker":
        worker_part(checkpoints, args.tokens)
        return
    if args.part == "master":
        master_part(checkpoints, args.tokens)
        return
    print_header(
        "memory: RSS after recording token gaps (worker) and merging them (master)",
        [
            f"{args.tokens} token events per synthetic request, 2 classes; a delta every "
            f"{REPORT_EVERY} requests; each part in a fresh process. Phase-tagging hold set to "
            f"0 (at 25k events/s a worker holds 2 s x 25k x 40 B = 2 MB more)"
        ],
    )
    table = Table(
        [
            "process",
            "variant",
            "gaps",
            "VmRSS MB",
            "growth MB",
            "VmHWM MB",
            "histogram objects",
            "RSS after gc MB",
            "seconds",
        ]
    )
    for part in ("worker", "master"):
        for variant in VARIANTS:
            lines = run_part(part, checkpoints, args.tokens, variant)
            start = float(lines[0][1])
            table.row(part, variant, "0 (start)", f"{start:.1f}", "-", "-", "-", "-", "-")
            for gaps, rss, hwm, seconds, alive, after in lines[1:]:
                table.row(
                    part,
                    variant,
                    f"{int(gaps):,}",
                    f"{float(rss):.1f}",
                    f"{float(rss) - start:+.1f}",
                    f"{float(hwm):.1f}",
                    alive,
                    f"{float(after):.1f}",
                    seconds,
                )


def argparse_hidden() -> str:
    import argparse

    return argparse.SUPPRESS


if __name__ == "__main__":
    main()
