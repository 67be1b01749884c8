"""The summary, ``summary.json``'s document: each scope's figures (all classes, each class,
each model), the client's health and the run's facts; and the full terminal report, every
scope's (``report.terminal_report``) one after another.

Everything here is computed from merged histograms and counters, never from averages of
percentiles, so ``tpot-locust report OUT`` reproduces the end-of-run report exactly.
"""

from __future__ import annotations

from typing import Any, cast

from tpot_locust.common.metric_catalogue import ITL, READ_DELAY
from tpot_locust.common.run_facts import NO_FACTS, RunFacts
from tpot_locust.common.text_safety import printable
from tpot_locust.metrics.histogram_names import METRICS
from tpot_locust.metrics.interference import phase_summary
from tpot_locust.metrics.metric_set import ClassCounters, ClassMetrics, MetricSet
from tpot_locust.report.attribution import attribution_summary
from tpot_locust.report.client_figures import client_check, client_cost, client_health
from tpot_locust.report.metric_figures import EMPTY_METRIC, metric_summary
from tpot_locust.report.summary_types import ClassSummary, Fluidity, Goodput, Summary, TailGap
from tpot_locust.report.terminal_report import format_report
from tpot_locust.report.token_figures import prompt_cache, prompt_comparison
from tpot_locust.report.window_figures import burst_summary, window_seconds, window_summary
from tpot_locust.scenario.slo import TAIL_MIN_SAMPLES


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
            errors, f"{scope} {name}", lambda n=name: metric_summary(metrics, n), EMPTY_METRIC
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
    arrived = sum(metrics.counters.arrived_tokens for metrics in totals.groups.values())
    client |= built_part(
        errors, "client cost", lambda: client_cost(totals.client.cpu_ns, arrived), {}
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


def format_full_report(summary: Summary) -> str:
    """Every scope's report: all classes, then each class (where there are several) and
    each model."""
    parts = [format_report(summary)]
    if len(summary["classes"]) > 1:
        for name, class_summary in summary["classes"].items():
            parts.append(format_report(class_summary, scope=f"class {name}"))
    for name, model_summary in summary.get("models", {}).items():
        parts.append(format_report(model_summary, scope=f"model {printable(name)}"))
    return "\n\n".join(parts)
