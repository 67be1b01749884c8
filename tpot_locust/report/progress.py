"""The headless progress line: elapsed / duration, users, tokens/s, current TPOT p50/p99,
and how late this interval's reads came (the load generator's own health).

One line every 2 s, at most ``WIDTH`` columns: a terminal of 100 columns wrapped the old
one (~150) into two, so a run's progress read as a wall of text. The figures a person
follows (time, users, tokens/s, TPOT, requests; failures where there were any) are always
there; the client's health where the line has room, its least telling part left out first
(the read delay's p99, then the loop's stalls); ``(client busy)``, with the read delay's p90
or the loop's held share that made it so, whenever the client fell behind.
"""

from __future__ import annotations

import time

from tpot_locust.common.metric_catalogue import ITL, READ_DELAY, TPOT
from tpot_locust.common.run_facts import TimeseriesPoint, interval_figures
from tpot_locust.metrics.collector import Collector
from tpot_locust.metrics.stalls import loop_saturated
from tpot_locust.report.client_figures import client_check

PRINT_EVERY_S = 2.0
WIDTH = 100  # the terminal's columns the line must fit (the first screen's too)


class ProgressPrinter:
    def __init__(self, duration_s: float, warmup_s: float = 0.0) -> None:
        self.duration_s = duration_s
        self.warmup_s = warmup_s
        self.last_print = 0.0

    def maybe_print(self, collector: Collector) -> None:
        now = time.monotonic()
        if now - self.last_print < PRINT_EVERY_S or not collector.timeseries:
            return
        self.last_print = now
        point = collector.timeseries[-1]
        print(format_progress(point, self.duration_s, point["t"] < self.warmup_s), flush=True)


def format_progress(point: TimeseriesPoint, duration_s: float, warmup: bool = False) -> str:
    """One interval's line, at most ``WIDTH`` columns; ``warmup``: its figures are not
    recorded (said in place of the client's health where the line is full)."""
    tpot = interval_figures(point, TPOT.name)
    current = f"TPOT p50 {tpot['p50']:.2f} p99 {tpot['p99']:.2f} ms" if tpot["count"] else "TPOT -"
    rate = point["tokens_per_s"]  # None: a final point too short for rates
    tokens_per_s = f"{rate:,.0f} tokens/s" if rate is not None else "- tokens/s"
    failed = point["requests_failed"]
    requests = f"ok {point['requests_ok']:,}" + (f" failed {failed:,}" if failed else "")
    head = [
        f"[{point['t']:6.0f}s / {duration_s:g}s]",
        f"users {point['users']}",
        tokens_per_s,
        current,
        requests,
    ]
    itl = interval_figures(point, ITL.name)
    token_gap_ms = float(itl.get("p90") or 0.0) if itl.get("count") else 0.0
    check = client_check(interval_figures(point, READ_DELAY.name) or {"count": 0}, token_gap_ms)
    saturated = loop_saturated(point.get("loop_held_share"))
    # the client's health, the part left out first last: (rank, text)
    health: list[tuple[int, str]] = []
    if warmup:
        health.append((0, "(warm-up: not recorded)"))
    if point.get("stalls"):
        health.append((1, f"stalls {point['stalls']} (max {point['loop_lag_max_ms']:.0f} ms)"))
    if check["busy"] is False:
        health.append((2, f"read delay p99 {check['read_delay_p99_ms']:.2f} ms"))
    why = [f"read delay p90 {check['read_delay_p90_ms']:.2f} ms"] if check["busy"] else []
    why += [f"loop held {point['loop_held_share']:.0%}"] if saturated else []
    busy = [f" (client busy: {', '.join(why)})", " (client busy)"] if why else [""]
    kept = list(health)
    while kept and len(_joined(head, kept) + busy[-1]) > WIDTH:
        kept.remove(max(reversed(kept), key=lambda part: part[0]))  # the least telling
    line = _joined(head, kept)
    said = next((said for said in busy if len(line + said) <= WIDTH), busy[-1])
    return line[: WIDTH - len(said)] + said  # cut only where figures are beyond belief


def _joined(head: list[str], health: list[tuple[int, str]]) -> str:
    return "  ".join(head + [text for _, text in health])
