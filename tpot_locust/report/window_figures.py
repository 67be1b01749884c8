"""What a run's window in token time held, and what its schedule could not do, for the
summary and the report: the gaps and tokens inside it, the streams it cut, the first tokens
and stalls it could only bound (docs/metrics.md, "The window"), and the scheduled bursts
that never went or went late."""

from __future__ import annotations

from tpot_locust.metrics.metric_set import BURST_LATE_S, ClassCounters
from tpot_locust.report.summary_types import BurstCounts, Summary, Window


def burst_summary(counters: ClassCounters) -> BurstCounts | None:
    """Scheduled burst requests: due, sent, sent late (None: the scenario has no bursts)."""
    if not counters.burst_requests_due:
        return None
    return {
        "due": counters.burst_requests_due,
        "sent": counters.burst_requests_sent,
        "late": counters.burst_requests_late,
    }


def burst_problem(summary: Summary) -> str | None:
    """What went wrong with the scheduled bursts, in one line (None: every one went on
    time, or there were none)."""
    bursts = summary.get("bursts")
    if not bursts:
        return None
    unsent, late = bursts["due"] - bursts["sent"], bursts["late"]
    if not unsent and not late:
        return None
    parts = [f"{unsent:,} of {bursts['due']:,} burst requests never sent"] if unsent else []
    parts += [f"{late:,} sent over {BURST_LATE_S:g} s late"] if late else []
    return f"bursts: {', '.join(parts)} (preparing them outlasted their time: fewer per burst)"


def window_seconds(counters: ClassCounters) -> float:
    """Seconds from the first send (or first gap) measured to the last token event."""
    firsts = [t for t in (counters.first_send_wall_ns, counters.first_gap_wall_ns) if t]
    return (counters.last_token_wall_ns - min(firsts)) / 1e9 if firsts else 0.0


def window_summary(counters: ClassCounters) -> Window:
    """What the window in token time held: its gaps and tokens, the streams cut, the
    first tokens still awaited at the stop (docs/metrics.md, "The window")."""
    return {
        "gaps": counters.window_gaps,
        "tokens": counters.window_tokens,
        "gaps_after": counters.gaps_after_window,
        "cut": {
            "stop": counters.cut_at_stop,
            "timeout": counters.cut_by_timeout,
            "reset": counters.cut_by_reset,
            "error": counters.cut_by_error,
        },
        "cut_elapsed_s_max": round(counters.cut_elapsed_ns_max / 1e9, 3),
        "waiting_at_stop": counters.waiting_at_stop,
        "waiting_s_max": round(counters.waiting_ns_max / 1e9, 3),
        "censored_gaps": counters.censored_gaps,
        "censored_gap_s_max": round(counters.censored_gap_ns_max / 1e9, 3),
    }


def throughput(summary: Summary) -> str:
    """The run's rates over its window: tokens/s and requests/s; where no request finished
    (every answer outlasts the run), 0.00 requests/s would say nothing, so the window's
    tokens stand in its place (what was measured)."""
    requests, tokens = summary["requests"], summary["tokens"]
    over = f"over {summary['window_s']:.1f} s"
    if requests["ok"] or requests["failed"]:
        return f"{tokens['per_s']:,.1f} tokens/s, {requests['per_s']:.2f} requests/s {over}"
    measured = (summary.get("window") or {}).get("tokens") or tokens["output"]
    return f"{measured:,} tokens, {tokens['per_s']:,.1f} tokens/s {over}"


def format_window(summary: Summary) -> list[str]:
    """The window's lines: cut streams, first tokens still awaited, censored stalls."""
    window = summary.get("window")
    if not window:
        return []
    lines = []
    cut = window["cut"]
    wheres = (
        ("stop", "by the stop"),
        ("timeout", "by a timeout"),
        ("reset", "by a reset"),
        ("error", "by an error"),
    )
    counted = [(cut[name], words) for name, words in wheres if cut[name]]  # type: ignore[literal-required]
    if counted:
        where = ", ".join(f"{count:,} {words}" for count, words in counted)
        longest = window["cut_elapsed_s_max"]  # 0: not timed (a stop that came first)
        lasted = f", E2E of the longest >= {longest:,.1f} s" if round(longest, 1) > 0 else ""
        lines.append(
            f"streams cut mid-answer {sum(c for c, _ in counted):,} ({where}): their gaps "
            f"count{lasted}"
        )
    if waiting := window["waiting_at_stop"]:
        lines.append(
            f"no first token at the stop: {waiting:,} requests, the longest after "
            f"{window['waiting_s_max']:,.1f} s (TTFT >= that, not in TTFT)"
        )
    if censored := window["censored_gaps"]:
        lines.append(
            f"stalls past a timeout: {censored:,}, the longest >= "
            f"{window['censored_gap_s_max']:,.1f} s (censored, not in ITL)"
        )
    if after := window["gaps_after"]:
        lines.append(f"gaps after the window (the stop's drain, not counted): {after:,}")
    return lines
