"""The headless progress line: elapsed / duration, users, tokens/s, current TPOT p50/p99,
and how late this interval's reads came (the load generator's own health)."""

from __future__ import annotations

import time

from tpot_locust.common.metric_catalogue import ITL, READ_DELAY, TPOT
from tpot_locust.common.run_facts import TimeseriesPoint, interval_figures
from tpot_locust.metrics.collector import Collector
from tpot_locust.metrics.stalls import loop_saturated
from tpot_locust.report.client_figures import client_check

PRINT_EVERY_S = 2.0


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
        line = format_progress(point, self.duration_s)
        if point["t"] < self.warmup_s:
            line += "  (warm-up: not recorded)"
        print(line, flush=True)


def format_progress(point: TimeseriesPoint, duration_s: float) -> str:
    tpot = interval_figures(point, TPOT.name)
    current = (
        f"TPOT p50 {tpot['p50']:.2f} ms p99 {tpot['p99']:.2f} ms" if tpot["count"] else "TPOT -"
    )
    rate = point["tokens_per_s"]  # None: a final point too short for rates
    tokens_per_s = f"{rate:9,.0f}" if rate is not None else f"{'-':>9}"
    line = (
        f"[{point['t']:6.0f}s / {duration_s:g}s] users {point['users']:4d}  "
        f"tokens/s {tokens_per_s}  {current}  "
        f"ok {point['requests_ok']} failed {point['requests_failed']}"
    )
    if point.get("stalls"):
        line += f"  stalls {point['stalls']} (max {point['loop_lag_max_ms']:.0f} ms)"
    itl = interval_figures(point, ITL.name)
    token_gap_ms = float(itl.get("p90") or 0.0) if itl.get("count") else 0.0
    check = client_check(interval_figures(point, READ_DELAY.name) or {"count": 0}, token_gap_ms)
    saturated = loop_saturated(point.get("loop_held_share"))
    busy = " (client busy)" if check["busy"] or saturated else ""
    if check["busy"] is not None:
        line += (
            f"  read delay p90 {check['read_delay_p90_ms']:.2f} "
            f"p99 {check['read_delay_p99_ms']:.2f} ms"
        )
    if saturated:
        line += f"  loop held {point['loop_held_share']:.0%}"
    return line + busy
