"""Why the tail: which causes the slowest token gaps overlapped, and each worst gap's story.

For the samples above P99, P99.9 and P99.99 of TPOT and ITL, the share that overlapped each
cause (``metrics.causes``) and the share that overlapped none. Shares come from the
histograms kept per cause (``itl@prefill``, ..., ``itl@none``), counted above the same
bucket as the whole, so they are exact at any size and across workers. A gap can overlap
several causes: the shares do not sum to 100 %. The prompt tokens in prefill at the tail's
gaps (from the kept largest gaps) stand beside the same at every gap's median.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, cast

import numpy as np

from tpot_locust.common.metric_catalogue import ITL
from tpot_locust.common.percentiles import percentile_key
from tpot_locust.common.run_facts import NO_FACTS
from tpot_locust.metrics.causes import (
    CAUSES,
    KV_PRESSURE,
    PREEMPTION,
    PREFILL,
    QUEUEING,
    SERVER_PAUSE,
    UNEXPLAINED,
)
from tpot_locust.metrics.histogram_names import CAUSE_METRICS
from tpot_locust.metrics.histograms import count_above, histogram_stats
from tpot_locust.metrics.metric_set import ClassMetrics
from tpot_locust.metrics.recorder import PREFILL_AT_GAP, phase_metric
from tpot_locust.metrics.tail_gaps import WORST_GAPS_SHOWN
from tpot_locust.report.summary_types import Attribution, Summary, TailShares

TAIL_PERCENTILES = (99.0, 99.9, 99.99)
SHARE_DIGITS = 4


def attribution_summary(metrics: ClassMetrics, keep_tail: bool) -> Attribution | None:
    """The attribution of one class's (or every class's) tail; None before any gap.
    ``keep_tail``: also list every kept largest gap (``tail_gaps``), for the truth's check."""
    if not metrics.histograms.get(ITL.name) or not metrics.histograms[ITL.name].total_count:
        return None
    tails = {name: _metric_shares(metrics, name) for name in CAUSE_METRICS}
    result: dict[str, object] = {
        "note": "a gap can overlap several causes: shares do not sum to 1",
        **tails,
        "prefill_tokens": _prefill_tokens(metrics, tails[ITL.name]),
        "worst": [gap | {"story": gap_story(gap)} for gap in metrics.tail_gaps[:WORST_GAPS_SHOWN]],
    }
    if keep_tail:
        result["tail_gaps"] = metrics.tail_gaps
    # the metrics' keys beside the declared ones: what ``Attribution`` cannot declare
    return cast(Attribution, result)


def metric_tails(attribution: Attribution, name: str) -> dict[str, TailShares]:
    """One metric's tails (``name`` one of ``CAUSE_METRICS``), by tail percentile key;
    empty where the attribution has none (an older file)."""
    # the per-metric keys ``Attribution`` cannot declare (its docstring): as built above
    return cast("dict[str, TailShares]", attribution.get(name) or {})


def worker_shares(metrics: ClassMetrics, pause: Callable[[], None] | None = None) -> dict[str, Any]:
    """One worker's shares (its ITL and TPOT and their per-cause parts), for the per-worker
    view (``report.worker_rows``); empty before any gap. ``pause``: called between a
    metric's tails (~0.3 ms each with every cause; a metric took ~1 ms in one piece)."""
    itl = metrics.histograms.get(ITL.name)
    if itl is None or not itl.total_count:
        return {}
    return {name: _metric_shares(metrics, name, pause) for name in CAUSE_METRICS}


def _metric_shares(
    metrics: ClassMetrics, name: str, pause: Callable[[], None] | None = None
) -> dict[str, TailShares]:
    whole = metrics.histogram(name)
    stats = histogram_stats(whole, TAIL_PERCENTILES)
    parts = {
        cause: metrics.histograms[phase_metric(name, cause)]
        for cause in (*CAUSES, UNEXPLAINED)
        if phase_metric(name, cause) in metrics.histograms
    }
    rows: dict[str, TailShares] = {}
    for percentile in TAIL_PERCENTILES:
        threshold_us, above = stats.percentiles[percentile], stats.above[percentile]
        if pause is not None:
            pause()
        shares = {
            cause: round(count_above(part, threshold_us) / above, SHARE_DIGITS) if above else None
            for cause, part in parts.items()
        }
        rows[percentile_key(percentile)] = {
            "above_ms": threshold_us / 1000,
            "samples": above,
            "shares": shares,
        }
    return rows


def _prefill_tokens(
    metrics: ClassMetrics, itl_rows: dict[str, TailShares]
) -> dict[str, int | None]:
    """Prompt tokens in prefill at every gap's median, and at the median gap of each tail
    (from the kept largest gaps; None where the tail has more gaps than were kept)."""
    at_gaps = metrics.histograms.get(PREFILL_AT_GAP)
    median_all = histogram_stats(at_gaps, (50.0,)).percentiles[50.0] if at_gaps else 0
    tokens: dict[str, int | None] = {"all_gaps_median": median_all}
    kept = metrics.tail_gaps
    for key, row in itl_rows.items():
        tail = [gap for gap in kept if gap["ms"] > row["above_ms"]]
        complete = row["samples"] and len(tail) >= row["samples"]
        values = [gap.get("prefill_tokens", 0) for gap in tail]
        tokens[f"{key}_median"] = int(np.median(values)) if complete and values else None
    return tokens


def gap_story(
    gap: Mapping[str, Any],
    origin_wall_s: float | None = None,
    server_series: dict[str, list[Any]] | None = None,
) -> str:
    """One line: "118.2 ms at 12.3 s: 3 prompts in prefill (48,000 tokens, ours), KV cache
    97 %, 1 preemption in that interval"; the server's state from its sampled series. A
    prefill that overlapped the gap without explaining it is told as such, last."""
    at = gap.get("at_wall_s")
    when = f" at {at - origin_wall_s:.1f} s" if origin_wall_s and at else ""
    causes = list(gap.get("causes") or [])
    told: list[str] = []
    requests, tokens = gap.get("prefill_requests", 0), gap.get("prefill_tokens", 0)
    prompts = f"{requests} prompt{'s' * (requests != 1)}" if requests else "prompts"
    if PREFILL in causes:
        told.append(f"{prompts} in prefill ({tokens:,} tokens, ours)")
    if SERVER_PAUSE in causes:
        streams = gap.get("pause_streams", 0)
        told.append(
            f"server pause ({streams} streams waited together)" if streams else "server pause"
        )
    state = _server_state(server_series, gap) if server_series and at else {}
    for cause in causes:
        if cause in (PREFILL, SERVER_PAUSE):
            continue
        if cause == KV_PRESSURE and state.get("kv_usage") is not None:
            told.append(f"KV cache {state['kv_usage'] * 100:.0f} %")
        elif cause == PREEMPTION and state.get("preemptions"):
            count = int(state["preemptions"])
            told.append(f"{count} preemption{'s' * (count != 1)} in that interval")
        elif cause == QUEUEING and state.get("waiting"):
            told.append(f"{int(state['waiting'])} waiting")
        else:
            told.append(cause.replace("_", " "))
    if gap.get("prefill_overlapped") and PREFILL not in causes:
        told.append(f"{prompts} in prefill overlapped ({tokens:,} tokens, too few to explain it)")
    return f"{gap['ms']:.1f} ms{when}: {', '.join(told) if told else 'no cause overlapped'}"


def _server_state(series: dict[str, list[Any]], gap: Mapping[str, Any]) -> dict[str, Any]:
    """The server's state over the samples whose intervals overlap the gap: the largest
    KV usage and queue at either end of them, the preemptions they counted."""
    times = np.asarray(series.get("t_wall_s") or [], dtype=np.float64)
    end = gap["at_wall_s"]
    first = int(np.searchsorted(times, end - gap["ms"] / 1000))
    last = int(np.searchsorted(times, end))
    if last >= times.size:
        return {}
    state: dict[str, Any] = {}
    for name, combine in (("kv_usage", max), ("waiting", max), ("preemptions", sum)):
        values = series.get(name) or []
        low = first - 1 if combine is max else first  # a gauge: the interval's start too
        found = [v for v in values[max(low, 0) : last + 1] if v is not None]
        state[name] = combine(found) if found else None
    return state


def format_why_the_tail(summary: Summary) -> list[str]:
    """The report's "Why the tail" section (terminal)."""
    attribution = summary.get("attribution")
    if not attribution:
        return []
    lines = ["Why the tail: share of the samples above each percentile that overlapped a cause"]
    causes = [
        c
        for c in (*CAUSES, UNEXPLAINED)
        if any(
            c in row["shares"]
            for m in CAUSE_METRICS
            for row in metric_tails(attribution, m).values()
        )
    ]
    header = "".join(f"{cause:>13}" for cause in causes)
    lines.append(f"  {'':14}{'above ms':>10}{'samples':>9}{header}")
    for name in CAUSE_METRICS:
        for key, row in metric_tails(attribution, name).items():
            cells = "".join(_share(row["shares"].get(cause)) for cause in causes)
            label = f"{name.upper()} {key}"
            lines.append(f"  {label:14}{row['above_ms']:10.3f}{row['samples']:9,}{cells}")
    tokens = attribution.get("prefill_tokens") or {}
    tails = ", ".join(
        f"{key.removesuffix('_median')} {value:,}"
        for key, value in tokens.items()
        if key != "all_gaps_median" and value is not None
    )
    every = tokens.get("all_gaps_median", 0)
    lines.append(
        f"  prompt tokens in prefill (median): every gap {every:,}"
        + (f"; ITL tail {tails}" if tails else "")
    )
    lines.append("  (causes overlap: a row's shares need not sum to 100 %; 'none': no cause)")
    run = summary.get("run", NO_FACTS)
    origin, series = run.start_wall_s, (run.server_metrics or {}).get("series")
    for gap in attribution.get("worst", [])[:5]:
        lines.append(f"  {gap_story(gap, origin, series)}")
    return lines


def _share(value: float | None) -> str:
    return f"{'-':>13}" if value is None else f"{value * 100:12.1f}%"
