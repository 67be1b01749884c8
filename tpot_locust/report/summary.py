"""The seed-style report: tables, ``summary.json`` and the saved histograms.

Everything here is computed from merged histograms and counters, never from averages of
percentiles, so ``tpot-locust report OUT`` reproduces the end-of-run report exactly.
"""

from __future__ import annotations

from typing import Any, cast

from tpot_locust.common import metric_catalogue as catalogue
from tpot_locust.common.metric_catalogue import ITL, READ_DELAY, TPOT, TTFAT, TTFT
from tpot_locust.common.percentiles import PERCENTILE_KEYS, PERCENTILES, key_of, percentile_key
from tpot_locust.common.run_facts import NO_FACTS, RunFacts
from tpot_locust.common.text_safety import printable
from tpot_locust.common.timings import MAX_KEPT_TEXT
from tpot_locust.metrics.histogram_names import METRICS, STALL_METRICS, phase_metric
from tpot_locust.metrics.histograms import count_above, histogram_stats, without
from tpot_locust.metrics.interference import format_interference, phase_summary
from tpot_locust.metrics.metric_set import ClassCounters, ClassMetrics, MetricSet
from tpot_locust.metrics.stalls import CLIENT_STALL
from tpot_locust.report.attribution import attribution_summary, format_why_the_tail
from tpot_locust.report.client_figures import (
    client_check,
    client_health,
    format_arrival_clocks,
    format_busy_workers,
    format_client_busy,
    format_client_stalls,
    format_held_reporting,
)
from tpot_locust.report.server_view import format_gpu_state, format_server_view
from tpot_locust.report.summary_types import (
    ClassSummary,
    Fluidity,
    Goodput,
    MetricFigures,
    SetAside,
    StallFigures,
    Summary,
    TailGap,
)
from tpot_locust.report.token_figures import (
    format_prompt_tokens,
    format_token_kinds,
    prompt_cache,
    prompt_comparison,
    reasoned,
)
from tpot_locust.report.window_figures import (
    burst_problem,
    burst_summary,
    format_window,
    throughput,
    window_seconds,
    window_summary,
)
from tpot_locust.scenario.slo import TAIL_MIN_SAMPLES

PER_TOKEN_METRICS = catalogue.names("per_token")
TITLES = catalogue.titles()


def metric_summary(metrics: ClassMetrics, name: str) -> MetricFigures:
    stats = histogram_stats(metrics.read(name))
    summary: MetricFigures = {
        "unit": "ms",
        "count": stats.count,
        "mean": round(stats.mean / 1000, 4),
    }
    for percentile in PERCENTILES:
        summary[key_of(percentile)] = stats.percentiles[percentile] / 1000
    summary["max"] = stats.max / 1000
    summary["min"] = stats.min / 1000
    summary["above"] = {percentile_key(p): stats.above[p] for p in PERCENTILES}
    summary["unmeasured_tail"] = [
        percentile_key(p) for p in PERCENTILES if stats.count and stats.above[p] < TAIL_MIN_SAMPLES
    ]
    median = stats.percentiles[50.0]
    summary["skew_mean_over_median"] = round(stats.mean / median, 3) if median else None
    summary["tail_p99.99_over_median"] = (
        round(stats.percentiles[99.99] / median, 2) if median else None
    )
    if name in STALL_METRICS:
        summary[CLIENT_STALL] = stall_summary(metrics, name, stats.percentiles)
    return summary


def stall_summary(metrics: ClassMetrics, name: str, percentiles: dict[float, int]) -> StallFigures:
    """The samples of ``name`` that overlap client stalls: how many, how many lie above
    each printed percentile, and every figure again with them set aside."""
    tagged = metrics.histograms.get(phase_metric(name, CLIENT_STALL))
    if tagged is None or not tagged.total_count:
        return {"count": 0}
    clean = histogram_stats(without(metrics.read(name), tagged))
    set_aside: SetAside = {"count": clean.count}
    for p in PERCENTILES:
        set_aside[key_of(p)] = clean.percentiles[p] / 1000
    set_aside["max"] = clean.max / 1000
    return {
        "count": tagged.total_count,
        "above": {percentile_key(p): count_above(tagged, percentiles[p]) for p in PERCENTILES},
        "max": histogram_stats(tagged, ()).max / 1000,
        "set_aside": set_aside,
    }


# A metric whose summary failed at the end of a run: no samples, as the tables skip it.
_EMPTY_METRIC: dict[str, object] = {
    "unit": "ms",
    "count": 0,
    "mean": 0.0,
    **dict.fromkeys(PERCENTILE_KEYS, 0.0),
    "max": 0.0,
    "min": 0.0,
    "above": dict.fromkeys(PERCENTILE_KEYS, 0),
    "unmeasured_tail": [],
    "skew_mean_over_median": None,
    "tail_p99.99_over_median": None,
    "failed": True,
}


def fluidity_summary(counters: ClassCounters) -> Fluidity | None:
    """The tokens held to the pace (``slo.pace``) and how many came by their deadline;
    None where no pace was set (or no token came)."""
    if not counters.paced_tokens:
        return None
    on_time = counters.paced_tokens - counters.late_tokens
    return {
        "tokens": counters.paced_tokens,
        "late_tokens": counters.late_tokens,
        "on_time_fraction": round(on_time / counters.paced_tokens, 6),
        "late_requests": counters.late_requests,
    }


def goodput_summary(
    counters: ClassCounters, window_s: float, limits_ms: dict[str, float]
) -> Goodput:
    """Good requests (every per-request SLO met) per second of the window, and as a
    fraction of the requests that ended (failed ones count as not good)."""
    ended = counters.ok + counters.failed
    return {
        "limits_ms": limits_ms,
        "good": counters.good,
        "per_s": round(counters.good / window_s, 3) if window_s > 0 else 0.0,
        "fraction": round(counters.good / ended, 6) if ended else None,
    }


def _class_summary(
    metrics: ClassMetrics,
    goodput_ms: dict[str, float] | None = None,
    errors: list[str] | None = None,
    scope: str = "totals",
) -> ClassSummary:
    counters = metrics.counters
    window_s = window_seconds(counters)
    tokens_in_window = counters.window_tokens or counters.output_tokens
    per_s = tokens_in_window / window_s if window_s > 0 else 0.0
    summaries = {
        name: built_part(
            errors, f"{scope} {name}", lambda n=name: metric_summary(metrics, n), _EMPTY_METRIC
        )
        for name in METRICS
    }
    goodput = goodput_summary(counters, window_s, goodput_ms) if goodput_ms else None
    interference = built_part(
        errors, f"{scope} interference", lambda: phase_summary(metrics, TAIL_MIN_SAMPLES)
    )
    keep_tail = scope == "totals"  # every kept gap once, at the top: the truth's check reads it
    attribution = built_part(
        errors, f"{scope} attribution", lambda: attribution_summary(metrics, keep_tail)
    )
    return {
        "metrics": summaries,
        "client": client_check(summaries[READ_DELAY.name], summaries[ITL.name].get("p90", 0.0))
        | {
            "arrival_clocks": counters.arrival_clocks(),
            "departed_from_tap": counters.departed_from_tap,
            "read_in_batches": counters.read_in_batches,
            "bodies_after_end": counters.bodies_after_end,
            "shared_stamp_events": counters.shared_stamp_events,
            "multi_event_reads": counters.multi_event_reads,
        },
        "requests": {
            "ok": counters.ok,
            "failed": counters.failed,
            "errors": dict(sorted(counters.errors.items())),
            "interrupted": counters.interrupted,
            "per_s": round(counters.ok / window_s, 3) if window_s > 0 else 0.0,
        },
        "tokens": {
            "output": counters.output_tokens,
            "estimated": counters.estimated_requests > 0,
            "estimated_requests": counters.estimated_requests,
            "over_max_tokens": counters.over_max_tokens,
            "partial": counters.partial_tokens,
            "per_s": round(per_s, 1),
            "prompt_requested": counters.prompt_tokens_requested,
            "prompt_reported": counters.prompt_tokens_reported,
            "prompt": prompt_comparison(counters),
            "reasoning": counters.reasoning_tokens,
            "answer": counters.answer_tokens,
            "reasoning_requests": counters.reasoning_requests,
            "window_reasoning": counters.window_reasoning_tokens,
            "window_answer": counters.window_tokens - counters.window_reasoning_tokens,
            "prompt_cache": prompt_cache(counters),
            "count_source": counters.count_sources(),
        },
        "window_s": round(window_s, 3),
        "window": window_summary(counters),
        "clamped_values": counters.clamped_values,
        "excluded": {"warmup": counters.excluded_warmup, "cooldown": counters.excluded_cooldown},
        "dropped_arrivals": counters.dropped_arrivals,
        "bursts": burst_summary(counters),
        "interference": interference,
        "attribution": attribution,
        "worst_gaps": cast("list[TailGap]", metrics.worst_gaps),  # the recorder's records
        "goodput": goodput,
        "fluidity": fluidity_summary(counters),
    }


def _part_summaries(
    scope_word: str, parts: dict[str, ClassMetrics], goodput_ms: Any, errors: list[str] | None
) -> dict[str, Summary]:
    """Each class's (or model's) own summary; one that fails to build is named in
    ``errors`` and left out."""
    summaries: dict[str, Summary] = {}
    for name, metrics in sorted(parts.items()):
        scope = f"{scope_word} {name}"
        part = built_part(
            errors, scope, lambda m=metrics, s=scope: _class_summary(m, goodput_ms, errors, s)
        )
        if part is not None:
            summaries[name] = part
    return summaries


def build_summary(
    totals: MetricSet, run: RunFacts = NO_FACTS, errors: list[str] | None = None
) -> Summary:
    """The summary of ``totals``. With ``errors`` (the end of a run), each part is built in
    its own guard: a part that fails is left out and named in ``errors``, the rest stays."""
    earlier = run.report_error  # a step before the summary failed (run_state)
    goodput_ms = run.goodput_limits_ms
    summary: Summary = built_part(
        errors, "totals", lambda: _class_summary(totals.combined(), goodput_ms, errors), {}
    )
    summary["classes"] = _part_summaries("class", totals.by_class(), goodput_ms, errors)
    if models := totals.by_model():  # a class split its traffic over models
        summary["models"] = _part_summaries("model", models, goodput_ms, errors)
    client = summary.setdefault("client", {})
    client |= built_part(
        errors, "client health", lambda: client_health(totals.client, run.start_wall_s), {}
    )
    if client.get("loop_saturated"):  # however late its reads seem (``client_check``)
        client["busy"] = True
    client["stall_threshold_ms"] = run.stall_threshold_ms
    summary["timeseries"] = run.timeseries if run.timeseries is not None else []
    summary["complete"] = run.complete if run.complete is not None else True
    if run.workers is not None:
        summary["workers"] = run.workers
    summary["run"] = run.without("timeseries", "complete", "workers", "report_error")
    if problems := ([earlier] if earlier else []) + (errors or []):
        summary["complete"] = False
        summary["report_error"] = "; ".join(problems)
    return summary


def built_part(errors: list[str] | None, name: str, build: Any, default: Any = None) -> Any:
    """``build()``; with ``errors``, a failure is noted there and ``default`` stands in."""
    if errors is None:
        return build()
    try:
        return build()
    except Exception as error:  # one broken part must not lose the others: it is named
        errors.append(f"{name}: {type(error).__name__}: {error}")
        return default


def _ms(value: float) -> str:
    return f"{value:10.3f}"


INTERVAL_TITLE = "95% interval"  # metrics.<metric>.ci95: report.run_intervals
WIDTH = 100  # the terminal's columns our lines fit


def _interval_text(bounds: list[float] | None) -> str:
    """A percentile's 95 % interval, ``low-high`` ms; ``not measured`` where it has none."""
    if bounds is None:
        return "not measured"
    return f"{bounds[0]:.3f}-{bounds[1]:.3f}"


def _tokens_per_s(value_ms: float) -> str:
    return f"{1000 / value_ms:10.1f}" if value_ms > 0 else f"{'-':>10}"


def format_metric(name: str, metric: MetricFigures) -> list[str]:
    """One metric's table; where samples overlap client stalls, a column with them set
    aside and a warning next to every percentile with any of them above it."""
    per_token = name in PER_TOKEN_METRICS
    stalls = metric.get(CLIENT_STALL) or {"count": 0}
    intervals = metric.get("ci95")
    lines = [f"{TITLES[name]}   count {metric['count']:,}"]
    header = f"  {'':8}{'ms':>10}" + (f"{'tokens/s':>10}" if per_token else "")
    header += f"{'samples above':>16}" + (f"{INTERVAL_TITLE:>22}" if intervals else "")
    lines.append(header + (f"{'stall-free':>12}" if stalls["count"] else ""))
    rows: list[tuple[str, float, str]] = [("mean", metric["mean"], "")]
    for percentile in PERCENTILES:
        key = key_of(percentile)
        label = "median" if percentile == 50.0 else f"P{percentile:g}"
        above = metric["above"][key]
        unmeasured = key in metric["unmeasured_tail"]
        rest = f"{above:14,}" + (" *" if unmeasured else "  ")
        if intervals:
            rest += f"{_interval_text(intervals.get(key)):>22}"
        if stalls["count"]:
            rest += _ms(stalls["set_aside"][key]).rjust(12)
            if tagged := stalls["above"][key]:
                whose = ": the client's tail" if 2 * tagged >= above else ""
                rest += f"  ! {tagged:,} in stalls{whose}"
        rows.append((label, metric[key], rest))
    max_rest = f"{'':16}{_ms(stalls['set_aside']['max']).rjust(12)}" if stalls["count"] else ""
    rows.append(("max", metric["max"], max_rest))
    for label, value, rest in rows:
        line = f"  {label:8}{_ms(value)}" + (_tokens_per_s(value) if per_token else "")
        lines.append((line + rest).rstrip())
    if intervals and (reasons := metric.get("ci95_not_measured")):
        first, why = next(iter(reasons.items()))
        note = f"  {first.upper()}'s interval {why}"
        lines.append(note if len(note) <= WIDTH else note[: WIDTH - 3] + "...")
    if metric["unmeasured_tail"]:
        lines.append(
            f"  * fewer than {TAIL_MIN_SAMPLES} samples above: that tail is not yet measured "
            "(run longer)"
        )
    if stalls["count"]:
        lines.append(
            f"  {stalls['count']:,} samples overlap client stalls (worst {stalls['max']:.1f} ms);"
            " stall-free: every figure with them set aside"
        )
    skew, tail = metric["skew_mean_over_median"], metric["tail_p99.99_over_median"]
    if skew is not None:
        lines.append(
            f"  skew (mean/median) {skew:.2f}x   tail amplification (P99.99/median) {tail:.1f}x"
        )
    return lines


# The seed's figures: when one has no sample, the report says why it may have none
# rather than leave its section out (a reader took a vanished section for a pass).
NO_SAMPLES = {
    TPOT.name: "no token gap arrived inside the window",
    ITL.name: "no token gap arrived inside the window",
    TTFT.name: "no request sent inside the window had its first token",
}
ALWAYS_SHOWN = tuple(NO_SAMPLES)


def format_report(summary: Summary, scope: str = "all classes") -> str:
    requests, tokens = summary["requests"], summary["tokens"]
    lines = [f"=== tpot-locust report ({printable(scope)}) ==="]
    workers = summary.get("workers")
    if workers:
        lines.append(
            f"workers: {workers['reported_in_full']} of {workers['seen']} reported in full"
        )
    lines.extend(format_busy_workers(summary))
    if stopped := summary.get("run", NO_FACTS).stopped_because:
        lines.append(f"RUN STOPPED EARLY: {printable(stopped)}")
    if report_error := summary.get("report_error"):
        lines.append(f"REPORT INCOMPLETE (not a valid measurement): {printable(report_error)}")
    if recovered := summary.get("run", NO_FACTS).recovered:  # the master died (recovery)
        lines.append(f"INCOMPLETE RUN: {printable(recovered)}")
    elif not summary.get("complete", True) and (
        not report_error or (workers and workers.get("missing"))
    ):
        missing = ", ".join(map(printable, workers["missing"])) if workers else "unknown"
        lines.append(f"INCOMPLETE RUN: no final report from worker(s) {missing}")
    errors = ", ".join(f"{printable(k)}={v}" for k, v in requests["errors"].items()) or "none"
    estimated = " (estimated: server reported no usage)" if tokens["estimated"] else ""
    lines.append(f"requests ok {requests['ok']:,}  failed {requests['failed']:,}  errors: {errors}")
    if requests.get("interrupted"):
        lines.append(
            f"requests interrupted by the stop: {requests['interrupted']:,} (their "
            "gaps in the window count; E2E counts finished requests)"
        )
    lines.extend(format_window(summary))
    lines.append(
        f"output tokens {tokens['output']:,}{estimated}  partial (failed requests) "
        f"{tokens['partial']:,}"
    )
    if over := tokens.get("over_max_tokens"):  # a server that ignores max_tokens
        lines.append(
            f"! {over:,} requests got more output tokens than their max_tokens asked for: the "
            f"server ignores it (a next turn kept {MAX_KEPT_TEXT >> 20} MiB of such an answer "
            "at most)"
        )
    if prompt := format_prompt_tokens(tokens):
        lines.append(prompt)
    lines.extend(format_token_kinds(tokens))
    lines.append(f"throughput {throughput(summary)}")
    if fluidity := summary.get("fluidity"):
        pace = summary.get("run", NO_FACTS).pace_ms or {}
        paced = (
            f" (first token {pace[TTFT.name]:g} ms, each next {pace[TPOT.name]:g} ms after)"
            if pace
            else ""
        )
        lines.append(
            f"fluidity {fluidity['on_time_fraction'] * 100:.2f}% of {fluidity['tokens']:,} tokens "
            f"by their deadline{paced}; {fluidity['late_requests']:,} requests stalled "
            "(stall time below)"
        )
    if goodput := summary.get("goodput"):
        limits = ", ".join(
            f"{printable(name)} <= {ms:g} ms" for name, ms in goodput["limits_ms"].items()
        )
        fraction = "-" if goodput["fraction"] is None else f"{goodput['fraction'] * 100:.2f}%"
        lines.append(
            f"goodput {goodput['per_s']:.2f} good requests/s, {fraction} of ended requests "
            f"good ({limits})"
        )
    lines.extend(format_arrival_clocks(summary))
    lines.extend(format_client_busy(summary))
    excluded, dropped = summary["excluded"], summary["dropped_arrivals"]
    if excluded["warmup"] or excluded["cooldown"] or dropped:
        lines.append(
            f"left out: {excluded['warmup']} warm-up and {excluded['cooldown']} cool-down "
            f"requests; {dropped} open-loop arrivals dropped (max_in_flight full)"
        )
    lines.extend(format_client_stalls(summary))
    lines.extend(format_held_reporting(summary))
    if problem := burst_problem(summary):
        lines.append(f"! {problem}")
    for name in METRICS:
        metric = summary["metrics"].get(name)  # a summary saved before a metric was added
        if metric and not metric["count"] and name in ALWAYS_SHOWN:  # said, never dropped
            lines += ["", f"{catalogue.shorts()[name]}: no samples ({NO_SAMPLES[name]})"]
            continue
        if not metric or metric["count"] == 0 or (name == TTFAT.name and not reasoned(tokens)):
            continue
        lines.append("")
        lines.extend(format_metric(name, metric))
    if extra := format_interference(summary):
        lines.append("")
        lines.extend(extra)
    if why := format_why_the_tail(summary):
        lines.append("")
        lines.extend(why)
    if server := format_server_view(summary):
        lines.append("")
        lines.extend(server)
    if gpu := format_gpu_state(summary):
        lines.append("")
        lines.extend(gpu)
    return "\n".join(lines)


def format_full_report(summary: Summary) -> str:
    parts = [format_report(summary)]
    if len(summary["classes"]) > 1:
        for name, class_summary in summary["classes"].items():
            parts.append(format_report(class_summary, scope=f"class {name}"))
    for name, model_summary in summary.get("models", {}).items():
        parts.append(format_report(model_summary, scope=f"model {printable(name)}"))
    return "\n\n".join(parts)
