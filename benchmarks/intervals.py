"""How sure is each number (issue 55): confidence intervals for a tail percentile of one run.

Usage: python benchmarks/intervals.py RUN_DIR [RUN_DIR ...] [--slice-s 1] [--boot 1000]
                                      [--methods all|LIST] [--threshold 0.03] [--seed 0]

Each RUN_DIR is the ``--out`` folder of one ``tpot-locust run`` on the embedded simulator
(``truth.jsonl`` and ``summary.json``), the runs differing only in seed. The truth stands in
for the run's per-interval histograms: every token gap (TPOT = gap / tokens of the event)
whose later event's send time lies inside ``run.window_wall_ns`` is put in the slice of
``--slice-s`` seconds it falls in (slice 0 starts at the window's start), binned on a log
scale of relative width 0.05 % (finer than HDR's 3 significant digits). A method sees one
run's slice histograms only. The *pooled truth* of a percentile is the percentile of all the
runs' window gaps together.

Printed per method and percentile (P50, P90, P99, P99.9):
  cover     runs whose 95 % interval holds the pooled truth / runs given an interval
  half      median half-width ((hi - lo) / 2) as % of the run's estimate
  n/m       runs for which the method said "not measured"
  A/A sig   pairs of runs (1 vs 2, 3 vs 4, ...) whose estimates differ by more than the
            interval of the difference (sqrt(h1^2 + h2^2), h = half-width)
  A/A flag  pairs flagged "regressed": the difference is significant and above --threshold
            of the first run's estimate (every such flag is false: the runs are the same)
The last line gives the naive flag rate (difference above the threshold, no interval).

Percentiles are nearest-rank (the smallest value with at least p of the samples at or below).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np

PERCENTILES = (0.50, 0.90, 0.99, 0.999)
LOG_STEP = math.log(1.0005)  # bin width: 0.05 % of the value
LO_MS = 0.01
N_BINS = int(math.log(60_000 / LO_MS) / LOG_STEP) + 2  # 0.01 ms .. 60 s
CENTRES = LO_MS * np.exp((np.arange(N_BINS) + 0.5) * LOG_STEP)
Z = 1.959963984540054
# Student t, 0.975 quantile, by degrees of freedom (1..30); beyond 30 the normal's.
T975 = (
    12.706,
    4.303,
    3.182,
    2.776,
    2.571,
    2.447,
    2.365,
    2.306,
    2.262,
    2.228,
    2.201,
    2.179,
    2.160,
    2.145,
    2.131,
    2.120,
    2.110,
    2.101,
    2.093,
    2.086,
    2.080,
    2.074,
    2.069,
    2.064,
    2.060,
    2.056,
    2.052,
    2.048,
    2.045,
    2.042,
)


def t975(df: int) -> float:
    return T975[df - 1] if df <= len(T975) else Z


# ----------------------------------------------------------------------------- data


def load_run(folder: Path, slice_s: float) -> np.ndarray:
    """One run's per-slice histograms: (slices x bins) counts of the window's TPOT gaps."""
    summary = json.loads((folder / "summary.json").read_text())
    start, end = summary["run"]["window_wall_ns"]
    times, values = [], []
    with open(folder / "truth.jsonl") as fh:
        for line in fh:
            record = json.loads(line)
            sends = record.get("send_ns")
            if not sends or len(sends) < 2:
                continue
            send = np.asarray(sends, dtype=np.int64)
            tokens = np.asarray(record.get("tokens") or [1] * len(sends), dtype=np.float64)
            gap_ms = np.diff(send) / 1e6 / np.maximum(tokens[1:], 1)
            later = send[1:]
            keep = (later >= start) & (later <= end)
            times.append(later[keep])
            values.append(gap_ms[keep])
    t = np.concatenate(times)
    v = np.concatenate(values)
    n_slices = max(1, math.ceil((end - start) / (slice_s * 1e9)))
    slice_of = np.minimum(((t - start) // int(slice_s * 1e9)).astype(np.int64), n_slices - 1)
    bins = np.clip(
        (np.log(np.maximum(v, LO_MS) / LO_MS) / LOG_STEP).astype(np.int64), 0, N_BINS - 1
    )
    hist = np.zeros((n_slices, N_BINS), dtype=np.float64)
    np.add.at(hist, (slice_of, bins), 1.0)
    return hist


def pct(counts: np.ndarray, p: float) -> float:
    """Nearest-rank percentile of one histogram (counts over CENTRES)."""
    cum = np.cumsum(counts)
    rank = max(1.0, math.ceil(p * cum[-1] - 1e-9))
    return float(CENTRES[np.searchsorted(cum, rank)])


def pct_rows(counts: np.ndarray, p) -> np.ndarray:
    """Nearest-rank percentile(s) of each row of a (rows x bins) matrix: (rows,) for one p,
    (rows x len(p)) for several."""
    cum = np.cumsum(counts, axis=1)
    ps = np.atleast_1d(p)
    ranks = np.maximum(1.0, np.ceil(ps[None, :] * cum[:, -1:] - 1e-9))
    idx = np.stack([np.searchsorted(row, r) for row, r in zip(cum, ranks, strict=True)])
    out = CENTRES[idx]
    return out[:, 0] if np.ndim(p) == 0 else out


def value_at_rank(counts: np.ndarray, rank: float) -> float:
    cum = np.cumsum(counts)
    rank = min(max(1.0, rank), cum[-1])
    return float(CENTRES[np.searchsorted(cum, rank)])


def sections(hist: np.ndarray, k: int) -> np.ndarray:
    """k contiguous sections of the slices (as equal in slice count as they come)."""
    parts = np.array_split(np.arange(hist.shape[0]), k)
    return np.stack([hist[p].sum(axis=0) for p in parts if len(p)])


# -------------------------------------------------------------------------- methods
# A method maps (run's slice histograms, p) to (estimate, lo, hi) or None (not measured).


def naive_binomial(hist, p, _rng):
    total = hist.sum(axis=0)
    n = total.sum()
    est = pct(total, p)
    sd = math.sqrt(n * p * (1 - p))
    lo_rank, hi_rank = math.floor(n * p - Z * sd), math.ceil(n * p + Z * sd) + 1
    if lo_rank < 1 or hi_rank > n:
        return None
    return est, value_at_rank(total, lo_rank), value_at_rank(total, hi_rank)


def tail_sections(sec: np.ndarray, est: float) -> int:
    """How many sections hold at least one sample above the run's estimate."""
    above = CENTRES > est
    return int((sec[:, above].sum(axis=1) > 0).sum())


def sectioning(k=None, section_s=None, centre="whole", log=False, min_tail=0, slice_s=1.0):
    """Batch means on percentiles: est +- t(k-1) sd(section estimates) / sqrt(k).

    k sections, or as many sections of at least ``section_s`` seconds as the window holds.
    centre: "whole" (the whole run's percentile) or "mean" (the mean of the sections').
    log: the same on log values (a multiplicative interval).
    min_tail: "not measured" unless at least this many sections hold a sample above the
    run's estimate (a fraction of k where < 1).
    """

    def method(hist, p, _rng):
        kk = k if k else max(2, int(hist.shape[0] * slice_s // section_s))
        kk = min(kk, hist.shape[0])
        sec = sections(hist, kk)
        whole = pct(hist.sum(axis=0), p)
        ests = pct_rows(sec, p)
        need = min_tail if min_tail >= 1 else math.ceil(min_tail * kk)
        if need and tail_sections(sec, whole) < need:
            return None
        x = np.log(ests) if log else ests
        centre_v = (math.log(whole) if log else whole) if centre == "whole" else float(x.mean())
        half = t975(kk - 1) * x.std(ddof=1) / math.sqrt(kk)
        lo, hi = centre_v - half, centre_v + half
        if log:
            return math.exp(centre_v), math.exp(lo), math.exp(hi)
        return centre_v, lo, hi

    return method


def rank_sectioning(k, min_rank_room=True):
    """Sectioning on ranks (Woodruff's interval with a batch-means variance).

    x = the whole run's percentile; each section i holds c_i of its n_i samples at or below
    x; F = sum c / sum n, se(F)^2 = k / (k - 1) * sum (c_i - F n_i)^2 / (sum n)^2 (the ratio
    estimator's variance over sections). The interval is the whole run's own quantiles at
    p -+ t(k-1) se(F). "Not measured" where p + t se(F) reaches the run's largest sample
    (the run holds too few independent samples above the percentile to bound it).
    """

    def method(hist, p, _rng):
        sec = sections(hist, min(k, hist.shape[0]))
        kk = sec.shape[0]
        total = sec.sum(axis=0)
        n = total.sum()
        est = pct(total, p)
        below = CENTRES <= est
        c = sec[:, below].sum(axis=1)
        ni = sec.sum(axis=1)
        f = c.sum() / n
        se = math.sqrt(kk / (kk - 1) * ((c - f * ni) ** 2).sum()) / n
        half = t975(kk - 1) * se
        lo_rank, hi_rank = (p - half) * n, (p + half) * n
        if hi_rank >= n or lo_rank < 1:
            return None
        return (
            est,
            value_at_rank(total, math.floor(lo_rank)),
            value_at_rank(total, math.ceil(hi_rank)),
        )

    return method


def block_bootstrap(length, kind="moving", interval="percentile", boot=1000):
    """Moving (or circular) block bootstrap over slices, blocks of ``length`` slices."""
    cache = {}

    def method(hist, p, rng):
        m = hist.shape[0]
        total = hist.sum(axis=0)
        est = pct(total, p)
        if cache.get("key") is not hist:  # one set of resamples serves every percentile
            starts_n = m if kind == "circular" else m - length + 1
            n_blocks = math.ceil(m / length)
            starts = rng.integers(0, starts_n, size=(boot, n_blocks))
            idx = (starts[:, :, None] + np.arange(length)[None, None, :]) % m
            idx = idx.reshape(boot, -1)[:, :m]
            weights = np.zeros((boot, m))
            np.add.at(weights, (np.repeat(np.arange(boot), m), idx.ravel()), 1.0)
            cache["key"], cache["reps"] = hist, pct_rows(weights @ hist, PERCENTILES)
        reps = cache["reps"][:, PERCENTILES.index(p)]
        q_lo, q_hi = np.quantile(reps, [0.025, 0.975])
        if interval == "basic":
            return est, 2 * est - q_hi, 2 * est - q_lo
        return est, float(q_lo), float(q_hi)

    return method


def section_bootstrap(k, boot=1000):
    """Bootstrap of k contiguous sections (non-overlapping blocks), percentile interval."""
    cache = {}

    def method(hist, p, rng):
        sec = sections(hist, min(k, hist.shape[0]))
        kk = sec.shape[0]
        est = pct(sec.sum(axis=0), p)
        if cache.get("key") is not hist:
            picks = rng.integers(0, kk, size=(boot, kk))
            weights = np.zeros((boot, kk))
            np.add.at(weights, (np.repeat(np.arange(boot), kk), picks.ravel()), 1.0)
            cache["key"], cache["reps"] = hist, pct_rows(weights @ sec, PERCENTILES)
        reps = cache["reps"][:, PERCENTILES.index(p)]
        q_lo, q_hi = np.quantile(reps, [0.025, 0.975])
        return est, float(q_lo), float(q_hi)

    return method


def methods(boot: int, slice_s: float) -> dict:
    m = {"C naive binomial": naive_binomial}
    for k in (5, 6, 8, 11):
        m[f"A sectioning k={k}"] = sectioning(k=k)
    m["A sectioning k=5, mean centre"] = sectioning(k=5, centre="mean")
    m["A sectioning k=11, mean centre"] = sectioning(k=11, centre="mean")
    m["A sectioning k=5, log"] = sectioning(k=5, log=True)
    m["A sectioning k=11, log"] = sectioning(k=11, log=True)
    m["A sections of >=2 s"] = sectioning(section_s=2.0, slice_s=slice_s)
    for length in (1, 2, 3, 4):
        m[f"B moving blocks {length} s, percentile"] = block_bootstrap(
            max(1, round(length / slice_s)), boot=boot
        )
        m[f"B moving blocks {length} s, basic"] = block_bootstrap(
            max(1, round(length / slice_s)), interval="basic", boot=boot
        )
    m["B circular blocks 2 s, percentile"] = block_bootstrap(
        max(1, round(2 / slice_s)), kind="circular", boot=boot
    )
    for k in (5, 8, 11):
        m[f"D rank sectioning k={k}"] = rank_sectioning(k)
    m["D section bootstrap k=5"] = section_bootstrap(5, boot=boot)
    m["D sectioning k=5, >=3 tail sections"] = sectioning(k=5, min_tail=3)
    m["D sectioning k=5, all tail sections"] = sectioning(k=5, min_tail=5)
    m["D sectioning k=5, log, all tail sections"] = sectioning(k=5, log=True, min_tail=5)
    m["D sectioning k=8, all tail sections"] = sectioning(k=8, min_tail=8)
    m["D sectioning k=11, >=half tail sections"] = sectioning(k=11, min_tail=0.5)
    return m


# ----------------------------------------------------------------------------- main


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--slice-s", type=float, default=1.0)
    parser.add_argument("--boot", type=int, default=1000)
    parser.add_argument("--methods", default="all", help="comma-separated name prefixes")
    parser.add_argument("--threshold", type=float, default=0.03)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    runs = [load_run(r, args.slice_s) for r in args.runs]
    pooled = np.sum([h.sum(axis=0) for h in runs], axis=0)
    truth = {p: pct(pooled, p) for p in PERCENTILES}
    per_run = {p: [pct(h.sum(axis=0), p) for h in runs] for p in PERCENTILES}
    n = [int(h.sum()) for h in runs]
    print(
        f"{len(runs)} runs, {min(h.shape[0] for h in runs)}-{max(h.shape[0] for h in runs)} "
        f"slices of {args.slice_s:g} s, {min(n):,}-{max(n):,} gaps a run"
    )
    for p in PERCENTILES:
        v = per_run[p]
        print(
            f"P{p * 100:g}: pooled truth {truth[p]:.3f} ms, runs {min(v):.3f}-{max(v):.3f} "
            f"(sd {np.std(v, ddof=1) / truth[p] * 100:.1f} % of the truth)"
        )
    print()
    wanted = None if args.methods == "all" else [s.strip() for s in args.methods.split(",")]
    print(
        "| method | "
        + " | ".join(f"P{p * 100:g} cover / half / n/m" for p in PERCENTILES)
        + " | A/A sig (P50, P90, P99, P99.9) | A/A flag |"
    )
    print("|---|" + "---:|" * len(PERCENTILES) + "---:|---:|")
    pairs = [(i, i + 1) for i in range(0, len(runs) - 1, 2)]
    for name, method in methods(args.boot, args.slice_s).items():
        if wanted and not any(name.startswith(w) for w in wanted):
            continue
        rng = np.random.default_rng(args.seed)
        cells, sig_cells, flags = [], [], 0
        results = [{p: method(h, p, rng) for p in PERCENTILES} for h in runs]
        for p in PERCENTILES:
            res = [r[p] for r in results]
            given = [r for r in res if r is not None]
            cover = sum(lo <= truth[p] <= hi for _, lo, hi in given)
            halves = [(hi - lo) / 2 / est * 100 for est, lo, hi in given]
            half = f"{np.median(halves):.1f} %" if halves else "-"
            cells.append(f"{cover}/{len(given)} / {half} / {len(res) - len(given)}")
            sig = 0
            for a, b in pairs:
                if res[a] is None or res[b] is None:
                    continue
                ha = (res[a][2] - res[a][1]) / 2
                hb = (res[b][2] - res[b][1]) / 2
                d = res[b][0] - res[a][0]
                if abs(d) > math.hypot(ha, hb):
                    sig += 1
                    if abs(d) > args.threshold * res[a][0]:
                        flags += 1
            sig_cells.append(str(sig))
        print(
            f"| {name} | " + " | ".join(cells) + f" | {', '.join(sig_cells)} of {len(pairs)}"
            f" | {flags} of {len(pairs) * len(PERCENTILES)} |"
        )
    naive = sum(
        abs(per_run[p][b] - per_run[p][a]) > args.threshold * per_run[p][a]
        for p in PERCENTILES
        for a, b in pairs
    )
    print(
        f"\nNo interval (|difference| > {args.threshold:.0%}): {naive} of "
        f"{len(pairs) * len(PERCENTILES)} pair-percentiles flagged"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
