"""Why the tail: which causes the slowest token gaps overlapped, and each worst gap's story.

For the samples above P99, P99.9 and P99.99 of TPOT and ITL, the share that overlapped each
cause (``metrics.causes``) and the share that overlapped none. Shares come from the
histograms kept per cause (``itl@prefill``, ..., ``itl@none``), counted above the same
bucket as the whole, so they are exact at any size and across workers. A gap can overlap
several causes: the saved shares do not sum to 1. A person reads shares as parts of a whole,
so every place that shows them (``shares_of_100``) splits a gap of several causes between
them and rounds to parts that add up to 100 %. The prompt tokens in prefill at the tail's
gaps (from the kept largest gaps) stand beside the same at every gap; most gaps overlap no
prefill at all, so each is told as the share of gaps that overlapped one and the median of
those.

Causes are named for people by ``cause_title`` (``server pause``, not ``server_pause``):
the one place their display names live; the saved keys stay as they are.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Callable, Mapping
from typing import Any, cast

import numpy as np

from tpot_locust.common import metric_catalogue as catalogue
from tpot_locust.common.metric_catalogue import ITL
from tpot_locust.common.percentiles import TAIL_KEYS, percentile_key
from tpot_locust.common.run_facts import NO_FACTS
from tpot_locust.metrics.causes import (
    CAUSES,
    CLIENT_STALL,
    GPU_THROTTLE,
    KV_OFFLOAD,
    KV_PRESSURE,
    NETWORK,
    PREEMPTION,
    PREFILL,
    QUEUEING,
    SERVER_GC,
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
SHORTS = catalogue.shorts()
REPORT_WIDTH = 100  # the terminal's columns: a note wrapped within them
# What a person reads for each cause (and for none): the only place these names live.
CAUSE_TITLES = {
    PREFILL: "prefill",
    SERVER_PAUSE: "server pause",
    PREEMPTION: "preemption",
    KV_PRESSURE: "KV pressure",
    QUEUEING: "queueing",
    SERVER_GC: "server GC",
    GPU_THROTTLE: "GPU throttling",
    KV_OFFLOAD: "KV cache offload",
    NETWORK: "network",
    CLIENT_STALL: "client stall",
    UNEXPLAINED: "no cause",
}


def cause_title(cause: str) -> str:
    """A cause as a person reads it; a key we do not know (a newer or edited file) with its
    underscores as spaces."""
    return CAUSE_TITLES.get(cause) or cause.replace("_", " ")


def shares_of_100(shares: Mapping[str, object], digits: int = 0) -> dict[str, float]:
    """A tail's shares (``TailShares["shares"]``, overlapping) as parts of 100 % that add
    up, to ``digits`` decimals: the causes split what overlapped any cause (1 - none) in
    proportion to their shares (a gap of two causes counted in both: the saved shares add
    up to more than 1), then rounded by the largest remainder. Empty where no share is
    known (no sample above the percentile). Every place a person reads shares uses this,
    so none adds up to 101 %."""
    known = {
        cause: float(share)
        for cause, share in shares.items()
        if isinstance(share, (int, float))
        and not isinstance(share, bool)
        and math.isfinite(share)
        and share >= 0
    }
    if not known:
        return {}
    none = known.pop(UNEXPLAINED, None)
    total = sum(known.values())
    if none is None:  # a file without it: what no cause took
        none = max(0.0, 1.0 - total)
    none = min(none, 1.0)
    if total <= 0:
        none = 1.0
    scale = (1.0 - none) / total if total > 0 else 0.0
    exact = {cause: share * scale for cause, share in known.items()}
    exact[UNEXPLAINED] = none
    unit = 10**digits
    scaled = {cause: value * 100 * unit for cause, value in exact.items()}
    floors = {cause: math.floor(value) for cause, value in scaled.items()}
    left = 100 * unit - sum(floors.values())
    by_remainder = sorted(scaled, key=lambda cause: scaled[cause] - floors[cause], reverse=True)
    for cause in by_remainder[: max(left, 0)]:
        floors[cause] += 1
    order = [cause for cause in shares if cause in floors]
    order += [UNEXPLAINED] if UNEXPLAINED not in order else []
    return {cause: floors[cause] / unit for cause in order}


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


def worker_shares(
    metrics: ClassMetrics, pause: Callable[[], None] | None = None
) -> dict[str, object]:
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
    whole = metrics.read(name)
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
    """Prompt tokens in prefill at the gaps: every gap's median and the median gap's of
    each tail (from the kept largest gaps; None where the tail has more gaps than were
    kept), and, since most gaps overlap no prefill (their medians 0 beside a chart of
    thousands in flight), how many overlapped one (``..._in_prefill``, of ``..._gaps``)
    and the median of those (``..._in_prefill_median``)."""
    at_gaps = metrics.histograms.get(PREFILL_AT_GAP)
    median_all = histogram_stats(at_gaps, (50.0,)).percentiles[50.0] if at_gaps else 0
    tokens: dict[str, int | None] = {"all_gaps_median": median_all}
    total = int(at_gaps.total_count) if at_gaps else 0
    overlapping = count_above(at_gaps, 0) if at_gaps and total else 0
    tokens["all_gaps"], tokens["all_gaps_in_prefill"] = total, overlapping
    tokens["all_gaps_in_prefill_median"] = None
    if at_gaps and overlapping:  # the median of the gaps above the zeros
        rank = total - overlapping + (overlapping + 1) // 2
        value = at_gaps.get_value_at_percentile(100.0 * rank / total)
        tokens["all_gaps_in_prefill_median"] = int(value)
    kept = metrics.tail_gaps
    for key, row in itl_rows.items():
        tail = [gap for gap in kept if gap["ms"] > row["above_ms"]]
        complete = bool(row["samples"]) and len(tail) >= row["samples"]
        values = [int(gap.get("prefill_tokens", 0)) for gap in tail] if complete else []
        tokens[f"{key}_median"] = int(np.median(values)) if values else None
        some = [value for value in values if value > 0]
        tokens[f"{key}_gaps"] = len(values) if values else None
        tokens[f"{key}_in_prefill"] = len(some) if values else None
        tokens[f"{key}_in_prefill_median"] = int(np.median(some)) if some else None
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
            told.append(cause_title(cause))
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
    """The report's "Why the tail" section (terminal): each row's shares as parts of 100 %
    (``shares_of_100``), the prompt tokens in prefill at the gaps, the worst gaps' stories."""
    attribution = summary.get("attribution")
    if not attribution:
        return []
    lines = ["Why the tail: share of the samples above each percentile, by the cause overlapped"]
    causes = [
        c
        for c in (*CAUSES, UNEXPLAINED)
        if any(
            c in row["shares"]
            for m in CAUSE_METRICS
            for row in metric_tails(attribution, m).values()
        )
    ]
    causes += [] if UNEXPLAINED in causes else [UNEXPLAINED]  # a row's rest: what none took
    widths = [max(len(cause_title(cause)), 7) + 2 for cause in causes]
    header = "".join(f"{cause_title(c):>{w}}" for c, w in zip(causes, widths, strict=True))
    lines.append(f"  {'':14}{'above ms':>10}{'samples':>9}{header}")
    for name in CAUSE_METRICS:
        for key, row in metric_tails(attribution, name).items():
            parts = shares_of_100(row["shares"], digits=1)
            cells = "".join(
                f"{'-':>{w}}" if cause not in parts else f"{parts[cause]:{w - 1}.1f}%"
                for cause, w in zip(causes, widths, strict=True)
            )
            label = f"{SHORTS.get(name, name)} {key}"
            lines.append(f"  {label:14}{row['above_ms']:10.3f}{row['samples']:9,}{cells}")
    lines.append("  (a row adds up to 100 %: a gap of several causes is split between them)")
    for line in format_prefill_tokens(attribution.get("prefill_tokens")):
        head, _, told = line.partition(": ")  # each scope's figures kept on one line
        kept = head + ": " + ", ".join(item.replace(" ", "\u00a0") for item in told.split(", "))
        wrapped = textwrap.wrap(kept, REPORT_WIDTH, initial_indent="  ", subsequent_indent="    ")
        lines += [part.replace("\u00a0", " ") for part in wrapped]
    run = summary.get("run", NO_FACTS)
    origin, series = run.start_wall_s, (run.server_metrics or {}).get("series")
    for gap in attribution.get("worst", [])[:5]:
        lines.append(f"  {gap_story(gap, origin, series)}")
    return lines


def _count(value: object) -> int | None:
    """A saved count, or None (absent, or not a count: a file a person edited)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def prefill_scopes(tokens: object) -> list[tuple[str, float | None, int | None, int | None]]:
    """Each scope of ``attribution["prefill_tokens"]`` (every gap, then each ITL tail) as
    (scope, the share of its gaps that overlapped a prefill, the median prompt tokens of
    those, the median of all its gaps); None where unknown (an older or edited file)."""
    tokens = tokens if isinstance(tokens, dict) else {}
    scopes = []
    for scope, gaps_key in (
        ("every gap", "all_gaps"),
        *((key, f"{key}_gaps") for key in TAIL_KEYS),
    ):
        prefix = "all_gaps" if scope == "every gap" else scope
        gaps, some = _count(tokens.get(gaps_key)), _count(tokens.get(f"{prefix}_in_prefill"))
        share = some / gaps if gaps and some is not None and some <= gaps else None
        scopes.append(
            (
                scope,
                share,
                _count(tokens.get(f"{prefix}_in_prefill_median")),
                _count(tokens.get(f"{prefix}_median")),
            )
        )
    return scopes


def format_prefill_tokens(tokens: object) -> list[str]:
    """Prompt tokens in prefill at the gaps, as a person can square with the chart of the
    prompts in flight: the share of the gaps that overlapped a prefill and the median of
    those (most gaps overlap none: every gap's median alone read 0 beside thousands)."""
    told = []
    for scope, share, median_of_those, _ in prefill_scopes(tokens):
        if share is None:
            continue
        where = scope if scope == "every gap" else f"above ITL {scope}"
        those = f" (median {median_of_those:,} tokens)" if median_of_those is not None else ""
        told.append(f"{where} {share:.1%}{those}")
    if told:
        return ["gaps with a prompt in prefill: " + ", ".join(told)]
    medians = [(scope, median) for scope, _, _, median in prefill_scopes(tokens)]
    known = [f"{scope} {median:,}" for scope, median in medians if median is not None]
    return ["prompt tokens in prefill (median): " + ", ".join(known)] if known else []
