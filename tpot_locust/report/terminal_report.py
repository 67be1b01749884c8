"""One scope's terminal report (all classes, a class, a model), from its summary: the
run's state and warnings, requests and tokens, the client's own figures, each metric's table
(``report.metric_figures``) and the tail's sections; ``summary.format_full_report`` joins
every scope's into ``report.txt``, the first screen reads its warnings.
"""

from __future__ import annotations

from tpot_locust.common import metric_catalogue as catalogue
from tpot_locust.common.metric_catalogue import ITL, TPOT, TTFAT, TTFT
from tpot_locust.common.run_facts import NO_FACTS
from tpot_locust.common.text_safety import printable
from tpot_locust.common.timings import MAX_KEPT_TEXT
from tpot_locust.metrics.histogram_names import METRICS
from tpot_locust.metrics.interference import format_interference
from tpot_locust.report.attribution import format_why_the_tail
from tpot_locust.report.client_figures import (
    format_arrival_clocks,
    format_busy_workers,
    format_client_busy,
    format_client_cost,
    format_client_stalls,
    format_held_reporting,
)
from tpot_locust.report.metric_figures import format_metric
from tpot_locust.report.server_view import format_gpu_state, format_server_view
from tpot_locust.report.summary_types import Summary
from tpot_locust.report.token_figures import format_prompt_tokens, format_token_kinds, reasoned
from tpot_locust.report.window_figures import burst_problem, format_window, throughput

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
    lines.extend(format_client_cost(summary))
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
