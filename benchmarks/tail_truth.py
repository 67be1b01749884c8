"""Tail truth over whole runs: P99.9, P99.99 and max of TPOT against the simulator's truth.

Usage: python benchmarks/tail_truth.py [--streams 16,64,256] [--workers 0,2] [--seconds 30]
                                       [--gap-ms 3]

Each case is one whole ``tpot-locust run`` (start, every interval, stop included) of
``tests/scenarios/tail_truth.yaml`` with N users on the embedded simulator (fixed gap),
with ``--workers W`` (0: one process). Its own truth check (``summary.json``
``truth_check``) gives measured - true for every figure. Columns:
  err p99.9 / p99.99 / max   TPOT measured - true (ms), as printed by the run
  stall-free                 the same three with client-stall samples set aside, against the
                             true samples outside the stall windows (see README, "Truth check")
  stalls                     stall windows (> the threshold) / the worst one (ms, at s)
  lag p99                    loop lag P99 (ms), read delay P99 (ms)
  tagged >p99.99             tagged samples above the printed P99.99 (the report warns)
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = ROOT / "tests" / "scenarios" / "tail_truth.yaml"
KEYS = ("p99.9", "p99.99", "max")


def run_case(streams: int, workers: int, seconds: int, gap_ms: float, out: Path) -> dict:
    command = [
        sys.executable,
        "-m",
        "tpot_locust",
        "run",
        str(SCENARIO),
        "--out",
        str(out),
        "--users",
        str(streams),
        "--spawn-rate",
        str(streams),
        "--run-time",
        f"{seconds}s",
        "--workers",
        str(workers),
        "--set",
        f"simulator.gap_ms={gap_ms}",
    ]
    subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=seconds + 180)
    return json.loads((out / "summary.json").read_text())


def row(streams: int, workers: int, summary: dict) -> str:
    check = summary["truth_check"]["metrics"]["tpot"]
    errors = " ".join(f"{check[k]['error']:+7.2f}" for k in KEYS)
    free = " ".join(
        f"{check[k]['stall_free_error']:+7.2f}" if "stall_free_error" in check[k] else "      -"
        for k in KEYS
    )
    client = summary["client"]
    worst = client["worst_stalls"][0] if client["worst_stalls"] else None
    stalls = f"{client['stalls']:4d}" + (
        f" / {worst['ms']:5.1f} at {worst['at_s']:5.1f}" if worst else " /     -"
    )
    tagged = summary["metrics"]["tpot"]["client_stall"].get("above", {}).get("p99.99", 0)
    lag = f"{client['loop_lag']['p99']:5.2f} {client['read_delay_p99_ms'] or 0:5.2f}"
    return f"{streams:7d} {workers:7d}  {errors}  {free}  {stalls:22}  {lag}  {tagged:6d}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", default="16,64,256")
    parser.add_argument("--workers", default="0,2")
    parser.add_argument("--seconds", type=int, default=30)
    parser.add_argument("--gap-ms", type=float, default=3.0)
    args = parser.parse_args()
    print(f"TPOT errors vs truth (ms), {args.seconds} s runs, {args.gap_ms:g} ms gaps")
    header = f"{'streams':>7} {'workers':>7}  {'err p99.9 p99.99 max':23}  "
    header += f"{'stall-free (same)':23}  {'stalls / worst':22}  {'lag rd.dl':11}  {'tagged':>6}"
    print(header)
    for streams in (int(n) for n in args.streams.split(",")):
        for workers in (int(n) for n in args.workers.split(",")):
            with tempfile.TemporaryDirectory() as folder:
                summary = run_case(streams, workers, args.seconds, args.gap_ms, Path(folder))
            print(row(streams, workers, summary), flush=True)


if __name__ == "__main__":
    main()
