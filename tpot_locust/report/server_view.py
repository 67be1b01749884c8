"""What the server says about itself: its own latency histograms beside our figures.

A server's histograms (vLLM's ``vllm:inter_token_latency_seconds``, ...) have coarse
buckets: vLLM-CPU 0.32's ITL buckets start at 10, 25, 50 ms, so a 1.6 ms median and a
12.9 ms P99 share two buckets. Its percentile is shown as the bucket bounds it lies between
(``wire.server_metrics.histogram_percentile``), never an interpolated digit; ours beside it
say what the network and the client add and where inside the bucket the truth lies.
"""

from __future__ import annotations

import math
from typing import Any

from tpot_locust.common.text_safety import printable
from tpot_locust.report.summary_types import Summary
from tpot_locust.report.tail_tables import bucket_text

SHOWN = {"itl": "ITL", "ttft": "TTFT"}  # ours and the server's, where both have it
PERCENTILE_KEYS = ("p50", "p90", "p99", "p99.9", "p99.99")


def server_view(summary: Summary) -> dict[str, Any] | None:
    """Rows per metric: ours and the server's bounds per percentile; None when the server
    gave no histogram we read."""
    own = ((summary.get("run") or {}).get("server_metrics") or {}).get("own_percentiles") or {}
    rows: dict[str, Any] = {}
    for name in SHOWN:
        theirs, ours = own.get(name), (summary.get("metrics") or {}).get(name)
        if not theirs or not theirs.get("count") or not ours:
            continue
        rows[name] = {
            key: {"ours_ms": ours.get(key), "server": theirs.get(key)} for key in PERCENTILE_KEYS
        } | {"server_count": theirs["count"], "ours_count": ours.get("count")}
    return rows or None


def format_server_view(summary: Summary) -> list[str]:
    view = server_view(summary)
    if view is None:
        return []
    engine = (summary["run"].get("server_metrics") or {}).get("engine") or "the server"
    lines = [f"What the server says about itself ({engine}: its own histograms; ours beside)"]
    lines.append(f"  {'':8}" + "".join(f"{key:>22}" for key in PERCENTILE_KEYS))
    for name, row in view.items():
        ours = "".join(
            f"{row[key]['ours_ms']:19.3f} ms" if row[key]["ours_ms"] is not None else f"{'-':>22}"
            for key in PERCENTILE_KEYS
        )  # fmt: skip
        theirs = "".join(f"{bucket_text(row[key]['server']):>22}" for key in PERCENTILE_KEYS)
        lines.append(f"  {SHOWN[name] + ' ours':8}{ours}   ({row['ours_count']:,} samples)")
        lines.append(f"  {SHOWN[name] + ' srv':8}{theirs}   ({row['server_count']:,} samples)")
    lines.append("  the server's figure is the bucket it falls in (its buckets say no more);")
    lines.append("  counts differ where the server also served other clients or aborted requests")
    return lines


def format_gpu_state(summary: Summary) -> list[str]:
    """One line a DCGM exporter (``run["gpu_metrics"]``): the GPUs' clocks, power, heat,
    the samples in which a slowing clock event reason was set, and XID errors. Every value
    is checked here (a summary read back may have been edited)."""
    lines = []
    endpoints = (summary.get("run") or {}).get("gpu_metrics")
    for label, sampled in endpoints.items() if isinstance(endpoints, dict) else ():
        gpu = sampled.get("gpu") if isinstance(sampled, dict) else None
        name = printable(str(label))[:32]
        if not isinstance(gpu, dict):
            failed = _count(sampled.get("failed") if isinstance(sampled, dict) else None)
            lines.append(f"GPU {name}: no GPU sample ({failed} failed)")
            continue
        gpus = _count(gpu.get("gpus"))
        told = [f"{gpus or '?'} GPU{'s' * (gpus != 1)}"]
        clock = gpu.get("sm_clock_mhz")
        low, high = (
            (_number(v) for v in clock)
            if isinstance(clock, list) and len(clock) == 2
            else (None, None)
        )
        if low is not None and high is not None:
            told.append(f"SM clock {low:,.0f}-{high:,.0f} MHz")
        if (power := _number(gpu.get("power_w_max"))) is not None:
            told.append(f"power up to {power:,.0f} W")
        if (temp := _number(gpu.get("temp_c_max"))) is not None:
            told.append(f"up to {temp:.0f} C")
        reasons = gpu.get("slowing_reasons")
        named = (
            ", ".join(printable(str(r))[:64] for r in reasons[:16])
            if isinstance(reasons, list)
            else ""
        )
        slowed, samples = _count(gpu.get("slowed_samples")), _count(gpu.get("samples"))
        told.append(f"clocks held down in {slowed} of {samples} samples"
                    + (f" ({named})" if named else ""))  # fmt: skip
        xids = gpu.get("xid_errors")
        xids = [str(_count(x)) for x in xids[:16]] if isinstance(xids, list) else []
        told.append(f"XID errors {', '.join(xids)}" if xids else "no XID error")
        lines.append(f"GPU {name}: " + "; ".join(told))
    return lines


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _count(value: Any) -> int:
    number = _number(value)
    return int(number) if number is not None and 0 <= number < 2**53 else 0
