"""The load generator's own figures: did it read on time, which clock stamped its tokens,
where its loop stalled; and the report's lines about them.

Why apart from ``summary``: these judge the client, not the server, and have rules of their
own (``client_busy``) that the progress line, the report and per-worker lines share.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, cast
from urllib.parse import urlsplit

from tpot_locust.common.clock import KERNEL_CLOCK, SEGMENT_CLOCK, USER_CLOCK
from tpot_locust.common.metric_catalogue import ITL
from tpot_locust.common.percentiles import percentile_key
from tpot_locust.common.run_facts import NO_FACTS, Workers
from tpot_locust.common.text_safety import printable
from tpot_locust.common.timings import BODY_END_GRACE_S
from tpot_locust.metrics.histograms import histogram_stats
from tpot_locust.metrics.stalls import LOOP_SATURATED_SHARE, ClientHealth, loop_saturated
from tpot_locust.report.summary_types import ClientFigures, Summary, WorstStall

# A read delay at most this is on time, whatever the token gap (``client_busy``).
CLIENT_BUSY_READ_DELAY_MS = 1.0
# The read delay percentile ``client_busy`` judges. P90, not P99: the OS takes a core from
# a process now and then (a server on the same machine, a VM's steal time), and all the
# reads due then wait together. At 32 streams x 3 ms on 2 cores, a quiet client had
# 60-90 loop stalls of 2-12 ms in 10 s. Its read delay was P90 0.9-1.2 ms, P99 3.0-4.3 ms
# (6.1 ms in one CI run), around the 3 ms gap. A client that has fallen behind is late
# read after read: 8 streams, with the loop held 6 ms in every 10, read 1 in 3 late.
BUSY_PERCENTILE = 90.0


def client_health(health: ClientHealth, start_wall_s: float | None) -> dict[str, object]:
    """The recording processes' own event loops: lag, stall windows, the worst of them."""
    lag = histogram_stats(health.loop_lag, (50.0, 99.0, 99.9))
    held_share = health.held_share
    worst: list[WorstStall] = []  # the metrics layer's records, as the summary types them
    for stall in health.worst_stalls:
        at_s = stall["at_wall_s"] - start_wall_s if start_wall_s else None
        worst.append(cast(WorstStall, stall | {"at_s": None if at_s is None else round(at_s, 3)}))
    return {
        "loop_lag": {"count": lag.count}
        | {percentile_key(p): value / 1000 for p, value in lag.percentiles.items()}
        | {"max": lag.max / 1000},
        "stalls": health.stalls,
        "stalled_ms": round(health.stalled_ns / 1e6, 3),
        # of them, those during this process's own garbage collection (a client GC)
        "gc_stalls": health.gc_stalls,
        "gc_stalled_ms": round(health.gc_stalled_ns / 1e6, 3),
        "loop_held_share": None if held_share is None else round(held_share, 4),
        "loop_saturated": loop_saturated(held_share),
        "worst_stalls": worst,
    }


def client_cost(cpu_ns: int, arrived_tokens: int) -> dict[str, object]:
    """What reading the streams cost: the CPU time the stamping processes spent while their
    loops were watched (every thread's: reads, stamps, the tap, Locust, the recorder) per
    token that arrived in that time, and the tokens/s one core would read at that cost.
    Measured, for the clock and load in use; a lower bound of a process's capacity, since
    the fixed costs (timers, the report) weigh less per token at a higher load
    (``benchmarks/whole_run.py`` measures the same against a reader that parses nothing)."""
    cost: dict[str, object] = {"cpu_s": round(cpu_ns / 1e9, 3)}
    if cpu_ns <= 0 or arrived_tokens <= 0:
        return cost | {"cpu_us_per_token": None, "tokens_per_core_s": None}
    per_token_ns = cpu_ns / arrived_tokens
    return cost | {
        "cpu_us_per_token": round(per_token_ns / 1000, 3),
        "tokens_per_core_s": round(1e9 / per_token_ns),
    }


def client_check(read_delay: Mapping[str, Any], token_gap_ms: float = 0.0) -> ClientFigures:
    """Whether the load generator kept up, from how late it read data that had arrived.

    A late read moves no token's stamp (a kernel stamp is when the data arrived, and the
    segment clock gives each of several waiting events its own); the client fell behind
    when a tenth of its reads came later than the stream's own token gap (``token_gap_ms``,
    the ITL P90): by then the next token had come too, read after read. ``busy`` is None
    where reads carried no kernel stamp (not Linux, ``TPOT_LOCUST_STAMPS=user``).
    """
    if not read_delay["count"]:
        return {"read_delay_p90_ms": None, "read_delay_p99_ms": None, "busy": None}
    p90 = read_delay[percentile_key(BUSY_PERCENTILE)]
    return {
        "read_delay_p90_ms": p90,
        "read_delay_p99_ms": read_delay[percentile_key(99.0)],
        "busy": client_busy(p90, token_gap_ms),
    }


def client_busy(read_delay_p90_ms: float, token_gap_ms: float = 0.0) -> bool:
    """The one rule for a run, a worker or an interval: a tenth of the reads later than a
    token gap (and than ``CLIENT_BUSY_READ_DELAY_MS``: a read within it is on time)."""
    return read_delay_p90_ms > max(CLIENT_BUSY_READ_DELAY_MS, token_gap_ms)


def format_busy_workers(summary: Summary) -> list[str]:
    """A line naming every worker whose own read delay, or its saturated loop, says it fell
    behind."""
    workers: Workers | dict[str, dict[str, float]] = summary.get("workers") or {}
    limit = max(CLIENT_BUSY_READ_DELAY_MS, token_gap_ms(summary))
    reasons: dict[str, list[str]] = {}
    for client_id, p90 in workers.get("read_delay_p90_ms", {}).items():
        if client_busy(p90, token_gap_ms(summary)):
            reasons.setdefault(client_id, []).append(f"read delay P90 {p90:.1f} ms")
    for client_id, share in workers.get("loop_held_share", {}).items():
        if loop_saturated(share):
            reasons.setdefault(client_id, []).append(f"loop held {share:.0%}")
    if reasons:
        named = ", ".join(
            f"{printable(client_id)} ({', '.join(why)})"
            for client_id, why in sorted(reasons.items())
        )
        return [
            f"! busy workers (read delay P90 > {limit:g} ms, or loop held over "
            f"{LOOP_SATURATED_SHARE:.0%} of the time): {named}"
        ]
    return []


def format_client_busy(summary: Summary) -> list[str]:
    """A line when the run's client fell behind its streams: its reads came late
    (``client_busy``), or its loops were saturated (``ClientHealth.saturated``)."""
    client = summary["client"]
    if not client["busy"]:
        return []
    p90 = client["read_delay_p90_ms"]
    limit = max(CLIENT_BUSY_READ_DELAY_MS, token_gap_ms(summary))
    if p90 is not None and client_busy(p90, token_gap_ms(summary)):
        why = (
            f"10 % of reads came more than {p90:.1f} ms after their data arrived (read "
            f"delay P90 > {limit:g} ms, a token gap)"
        )
    else:
        why = (
            f"its loop was held in stalls {client.get('loop_held_share') or 0:.0%} of the "
            f"time (over {LOOP_SATURATED_SHARE:.0%}: too little left to read and send on "
            "time)"
        )
    return [f"! client busy: {why}: the client fell behind the streams. {busy_advice(summary)}"]


def busy_advice(summary: Summary) -> str:
    """What to do about a busy client: a server on this machine takes the same cores (its
    prefills above all), which more workers cannot give back."""
    run = summary.get("run", NO_FACTS)
    host = urlsplit(run.host or "").hostname or ""
    if host == "localhost" or host.startswith("127.") or host == "::1":
        during = " (its prefills above all)" if (run.bursts or {}).get("windows") else ""
        return (
            f"The server shares this machine ({host}) and its work{during} takes the cores "
            "the client reads with, which more workers cannot give back: run the server, or the "
            "client, on another machine, or give each its own cores (taskset)."
        )
    return "Use more workers or less load per worker" + _measured_capacity(summary) + "."


def _measured_capacity(summary: Summary) -> str:
    """The workers this run's token rate needs at the CPU per token it measured, or ""."""
    client = summary.get("client") or {}
    per_core = client.get("tokens_per_core_s")
    per_s = summary["tokens"]["per_s"] if "tokens" in summary else 0.0
    if not per_core or not per_s:
        return ""
    return (
        f" (measured: {client['cpu_us_per_token']:g} us of CPU a token, so one core reads "
        f"~{per_core:,} tokens/s; this run's {per_s:,.0f} tokens/s need "
        f"about {math.ceil(per_s / per_core)} processes with a core each)"
    )


def format_client_cost(summary: Summary) -> list[str]:
    """What reading cost, in a line (``client_cost``); nothing where it was not measured."""
    client = summary["client"]
    if not client.get("tokens_per_core_s"):
        return []
    return [
        f"client CPU: {client['cpu_s']:,.1f} s, {client['cpu_us_per_token']:g} us a token that "
        f"arrived: at that cost one core reads ~{client['tokens_per_core_s']:,} tokens/s (more "
        "at a higher load, where its fixed costs spread over more tokens)"
    ]


def token_gap_ms(summary: Summary) -> float:
    """The run's token gap (ITL P90, ms): how late a read may come (``client_busy``). P90,
    not the median: with gaps as uneven as a server's (a 10 s quickstart here: median
    1.4 ms, P90 3.9 ms), a quiet client's read delay (P99 1.96 ms, from each read's oldest
    data) passes the median."""
    itl = summary.get("metrics", {}).get(ITL.name) or {}
    return float(itl.get("p90") or 0.0) if itl.get("count") else 0.0


CLOCK_WORDS = {
    SEGMENT_CLOCK: "each segment's own kernel stamp",
    KERNEL_CLOCK: "kernel stamps (a read's newest segment)",
    USER_CLOCK: "the time each read returned",
}


def format_arrival_clocks(summary: Summary) -> list[str]:
    """Which clock stamped the requests' tokens, and how many sends are departures seen by
    the tap (docs/metrics.md, the start); one line."""
    clocks = summary["client"].get("arrival_clocks") or {}
    if not clocks:
        return []
    parts = [
        f"{CLOCK_WORDS.get(clock, printable(clock))} ({count:,} requests)"
        for clock, count in clocks.items()
    ]
    departed = summary["client"].get("departed_from_tap") or 0
    sends = (
        f"; sends: the tap's departure ({departed:,} of {sum(clocks.values()):,}), else "
        "just before the write"
    )
    return ["arrival stamps: " + ", ".join(parts) + sends, *_format_reads(summary)]


def _format_reads(summary: Summary) -> list[str]:
    """How the bodies were read (docs/metrics.md, "How bodies are read"); one line."""
    batched = summary["client"].get("read_in_batches") or 0
    period_ms = summary.get("run", NO_FACTS).read_batch_ms
    ok = summary["requests"]["ok"]
    went_on = summary["client"].get("bodies_after_end") or 0
    lines = []
    if went_on:  # the server's bug, seen: each such request held its user up to this long
        lines.append(
            f"! {went_on:,} of {ok:,} bodies went on after their final event ([DONE]): each "
            f"complete there, its connection closed {BODY_END_GRACE_S:g} s later at most"
        )
    if not batched:
        return (["reads: each body read as its data came"] if period_ms is not None else []) + lines
    period = f"{period_ms:g} ms batches" if period_ms else "batches"
    return [
        f"reads: {batched:,} of {ok:,} bodies in {period} after their first read, each "
        "end heard and read at once; the rest as their data came",
        *lines,
    ]


def format_client_stalls(summary: Summary) -> list[str]:
    """The run's client stalls in a line or two; nothing when the loops never stalled."""
    client = summary["client"]
    if not client.get("stalls"):
        return []
    lag = client["loop_lag"]
    clocks = client.get("arrival_clocks") or {}
    where = ", ".join(
        f"{stall['ms']:.1f} ms"
        + (f" at {stall['at_s']:.1f} s" if stall.get("at_s") is not None else "")
        + (f" on {printable(stall['worker'])}" if stall.get("worker") else "")
        + (f" (client GC, generation {stall['gc']})" if stall.get("gc") is not None else "")
        for stall in client["worst_stalls"][:3]
    )
    held = (
        f"the loop that reads the streams was held {client['stalls']:,} times over "
        f"{client['stall_threshold_ms'] or '-'} ms, {client['stalled_ms']:.1f} ms in all"
    )
    worst = f"  worst {where}; loop lag P99 {lag['p99']:.2f} ms, max {lag['max']:.1f} ms"
    if gc_stalls := client.get("gc_stalls"):
        held += (
            f"; {gc_stalls:,} of them ({client['gc_stalled_ms']:.1f} ms) while this "
            "client's garbage collector ran: a client GC (tune gc, not workers)"
        )
    if set(clocks) == {SEGMENT_CLOCK}:  # every token kept its own arrival: nothing moved
        return [f"client loop: {held}; every token's stamp was recovered, none moved", worst]
    return [
        f"! client stalls: {held}",
        worst,
        "  samples across a stall are tagged and also shown set aside (stall-free);",
        f"  {client['shared_stamp_events']:,} token events shared a read with the one before",
    ]


# A report interval that closed this many times its length late (and 5 s at least): the
# process that merges the run was held, not merely busy (in the held master's run its
# other intervals were 1.003 and 1.039 s long; a margin of 5x is wide of any busy one).
HELD_INTERVALS = 5
HELD_AT_LEAST_S = 5.0


def format_held_reporting(summary: Summary) -> list[str]:
    """The merging process (the master, or a local run's only one) held: SIGSTOP, a paused
    VM or container, swapping. Its report intervals closed late, so its time series has a
    hole; a master's workers kept streaming and their deltas waited for it (no figure lost),
    a local run's streams were not read meanwhile (its client stalls say how long)."""
    run = summary.get("run", NO_FACTS)
    every = run.report_interval_s or 1.0
    limit = max(HELD_INTERVALS * every, HELD_AT_LEAST_S)
    held = [p for p in summary.get("timeseries") or [] if (p.get("interval_s") or 0) > limit]
    if not held:
        return []
    longest = max(held, key=lambda point: point.get("interval_s") or 0)
    length, end = longest.get("interval_s") or 0.0, longest.get("t") or 0.0
    others = len(held) - 1
    more = f"; {others} more such hold{'s' * (others != 1)}" if others else ""
    if summary.get("workers"):
        what = "master", "the workers streamed on and their deltas waited for it: none lost"
    else:
        what = "Locust process", "its streams were not read meanwhile (client stalls)"
    return [
        f"! the {what[0]} was held {length:.1f} s (no report interval closed from "
        f"{end - length:.1f} s to {end:.1f} s{more}): its time series has a hole there; "
        f"{what[1]}"
    ]
