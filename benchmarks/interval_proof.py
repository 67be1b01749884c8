"""How sure is each number (issue 55), proven on many runs of the tool itself.

Usage: python benchmarks/interval_proof.py [--scenario benchmarks/bursty_engine.yaml]
           [--runs 100] [--run-time 10] [--durations 10,30,60] [--slowdowns 5,10,20]
           [--pairs 4] [--max-regression 3] [--out DIR] [--only coverage|power]

Unlike ``intervals.py`` (methods tried on the truth), this runs ``tpot-locust run`` and reads
what it wrote: each run's ``summary.json`` ``metrics.tpot.ci95`` and the verdicts of
``tpot-locust compare --json``. Runs go one at a time; a folder that already holds a
``summary.json`` is reused (a sitting cut short goes on where it stopped).

1. **Coverage**: ``--runs`` runs of ``--run-time`` s, seeds 1000, 1001, ... The population
   percentile is the pooled truth (every run's window TPOT gaps together, from
   ``truth.jsonl``). Per percentile: runs whose interval holds it / runs given one, runs
   told "not measured", the median half-width as % of the run's figure.
2. **A/A**: the same runs in pairs (1 vs 2, 3 vs 4, ...): ``compare`` over its whole default
   gate (every metric and percentile it judges) with ``--max-regression``; a pair flagged
   ``regressed`` anywhere is a false alarm of the gate.
3. **Power**: per duration of ``--durations`` and slowdown of ``--slowdowns`` (%, the
   engine's ``step_base_ms`` that much longer), ``--pairs`` pairs of a base run and a slowed
   one (their own seeds): how many ``compare --metrics tpot --percentiles p50,p90`` calls
   regressed, inconclusive and within.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from intervals import load_run, pct  # the truth's window gaps, sliced and binned

ROOT = Path(__file__).resolve().parent.parent
PERCENTILES = (("p50", 0.50), ("p90", 0.90), ("p99", 0.99), ("p99.9", 0.999))
BASE_STEP_MS = 4.97  # h200-llama3-8b's step_base_ms (sim/profiles.py)


def run(scenario: Path, out: Path, seed: int, run_time_s: int, step_ms: float | None) -> Path:
    """One ``tpot-locust run`` (reused where its folder has a summary)."""
    if (out / "summary.json").is_file():
        return out
    command = [sys.executable, "-m", "tpot_locust", "run", str(scenario), "--out", str(out)]
    command += ["--run-time", f"{run_time_s}s", "--set", f"seed={seed}"]
    if step_ms is not None:
        command += ["--set", f"simulator.engine.step_base_ms={step_ms:.4f}"]
    started = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True, timeout=run_time_s + 300)
    print(
        f"  {out.name}: exit {done.returncode} in {time.monotonic() - started:.0f} s",
        file=sys.stderr,
        flush=True,
    )
    return out


def compare(base: Path, other: Path, max_regression: float, *narrow: str) -> dict:
    command = [sys.executable, "-m", "tpot_locust", "compare", str(base), str(other), "--json"]
    command += ["--max-regression", f"{max_regression}%", *narrow]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    return json.loads(done.stdout)


def coverage(folders: list[Path]) -> None:
    runs = [load_run(folder, 1.0) for folder in folders]
    pooled = sum(hist.sum(axis=0) for hist in runs)
    print(f"\n{len(folders)} runs; pooled truth of the window's TPOT gaps\n")
    print("| percentile | pooled truth ms | covered / given | not measured | median half-width |")
    print("|---|---:|---:|---:|---:|")
    for key, fraction in PERCENTILES:
        truth = pct(pooled, fraction)
        covered = given = not_measured = 0
        halves: list[float] = []
        for folder in folders:
            tpot = json.loads((folder / "summary.json").read_text())["metrics"]["tpot"]
            bounds = (tpot.get("ci95") or {}).get(key)
            if bounds is None:
                not_measured += 1
                continue
            given += 1
            covered += bounds[0] <= truth <= bounds[1]
            halves.append((bounds[1] - bounds[0]) / 2 / tpot[key] * 100)
        half = f"{statistics.median(halves):.1f} %" if halves else "-"
        share = f"{covered}/{given} ({covered / given:.0%})" if given else "0/0"
        print(f"| {key} | {truth:.3f} | {share} | {not_measured} | {half} |")


def aa_pairs(folders: list[Path], max_regression: float) -> None:
    pairs = [(folders[i], folders[i + 1]) for i in range(0, len(folders) - 1, 2)]
    flagged, judged, inconclusive = 0, [], []
    for base, other in pairs:
        rows = compare(base, other, max_regression)["rows"]
        verdicts = [row.get("verdict") for row in rows]
        judged.append(len(verdicts))
        inconclusive.append(verdicts.count("inconclusive"))
        flagged += "regressed" in verdicts
    print(
        f"\nA/A, {len(pairs)} pairs, compare's whole default gate (--max-regression "
        f"{max_regression:g}%, {statistics.median(judged):.0f} figures a pair): "
        f"{flagged} of {len(pairs)} pairs flagged regressed ({flagged / len(pairs):.1%}); "
        f"median {statistics.median(inconclusive):.0f} figures inconclusive a pair"
    )


def power(args: argparse.Namespace, out: Path) -> None:
    print(
        f"\nPower: `compare --metrics tpot --percentiles p50,p90 --max-regression "
        f"{args.max_regression:g}%`, {args.pairs} pairs a cell: regressed / inconclusive / "
        "within (a pair regressed where either percentile is)\n"
    )
    slowdowns = [float(s) for s in args.slowdowns.split(",")]
    print("| run | " + " | ".join(f"+{s:g} % step" for s in slowdowns) + " |")
    print("|---|" + "---:|" * len(slowdowns))
    for duration in [int(d) for d in args.durations.split(",")]:
        bases = [
            run(args.scenario, out / f"power-{duration}s-base-{i}", 2000 + i, duration, None)
            for i in range(args.pairs)
        ]
        cells = []
        for slowdown in slowdowns:
            step_ms = BASE_STEP_MS * (1 + slowdown / 100)
            counts = {"regressed": 0, "inconclusive": 0, "within": 0}
            for i, base in enumerate(bases):
                name = f"power-{duration}s-slow{slowdown:g}-{i}"
                slow = run(args.scenario, out / name, 3000 + i, duration, step_ms)
                rows = compare(base, slow, args.max_regression, "--metrics", "tpot",
                               "--percentiles", "p50,p90")["rows"]  # fmt: skip
                verdicts = {row.get("verdict") for row in rows}
                worst = next((v for v in counts if v in verdicts), "within")
                counts[worst] += 1
            cells.append(" / ".join(str(n) for n in counts.values()))
        print(f"| {duration} s | " + " | ".join(cells) + " |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", type=Path, default=ROOT / "benchmarks/bursty_engine.yaml")
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--run-time", type=int, default=10, help="s, coverage and A/A runs")
    parser.add_argument("--durations", default="10,30,60", help="s, power runs")
    parser.add_argument("--slowdowns", default="5,10,20", help="%% longer engine steps")
    parser.add_argument("--pairs", type=int, default=4, help="power pairs a cell")
    parser.add_argument("--max-regression", type=float, default=3.0, help="%%")
    parser.add_argument("--out", type=Path, default=Path("/tmp/interval-proof"))
    parser.add_argument("--only", choices=("coverage", "power"))
    args = parser.parse_args()
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    print(f"interval proof, {args.scenario.name}, started {started}", flush=True)
    if args.only != "power":
        folders = [
            run(args.scenario, args.out / f"run-{i}", 1000 + i, args.run_time, None)
            for i in range(args.runs)
        ]
        kept = [folder for folder in folders if (folder / "summary.json").is_file()]
        coverage(kept)
        aa_pairs(kept, args.max_regression)
    if args.only != "coverage":
        power(args, args.out)
    ended = time.strftime("%H:%M UTC", time.gmtime())
    print(f"\nended {ended}")


if __name__ == "__main__":
    main()
