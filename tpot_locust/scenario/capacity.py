"""Guidance: the token events/s a scenario will ask of the load generator, and a warning when
its worker processes cannot stamp that many truthfully.

One worker process stamps a limited number of token events per second before its own event
loop falls behind and the gaps it measures stop being the server's
(``EVENTS_PER_S_PER_WORKER``, from ``benchmarks/capacity.py``). What a scenario asks depends
on the server's speed, which is not known before the run, so the estimate assumes a decode
rate per stream (``assumed_gap_ms`` per token event, one token per event) and no TTFT, so
that a faster server can only lower it:

- closed loop, ``users`` sessions: each user streams ``turns`` requests of the mean output
  length, pausing ``think_time`` between turns and ``wait_time`` between sessions; it is
  streaming a share ``stream / (stream + pauses)`` of the time, at 1000 / gap events/s;
- open loop, ``rate`` sessions/s: rate x turns x mean output tokens, but never more than
  ``max_in_flight`` sessions streaming at once;
- stages: the stage that asks most (closed classes share a stage's users by their
  ``users``, as the run does); bursts: all requests of the largest burst streaming together.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

from tpot_locust.common.clock import KERNEL_CLOCK, SEGMENT_CLOCK, USER_CLOCK
from tpot_locust.scenario.model import Scenario, TrafficClass
from tpot_locust.scenario.parsed_values import OrZero, ParsedDistribution

# Token events/s one worker process stamps truthfully, by the arrival clock it stamps on
# (``common.clock``; the one in use is ``wire.segment_stamps.arrival_clock``'s):
# - kernel and user, from ``benchmarks/capacity.py`` (client pinned to its own core, 2-core
#   shared VM, Python 3.11, 2026-11-30, kernel receive stamps, reads in the event loop): TPOT
#   p99 stayed within 0.5 ms of the server's true gaps up to 47k events/s at 2 ms gaps and
#   38k at 5 ms (31.6k and 12.7k with the loop's lag also under 1 ms); a real Locust worker
#   at 31.7k was +0.06 ms, at 62.9k +2.1 ms (scaling.py);
# - segment (where the tap opens; bodies read in 40 ms batches, the default), from
#   ``benchmarks/stamp_cost.py``: one pinned core read 118-124k events/s at 256 streams x
#   2 ms (the simulator's limit, not ours) with TPOT p99 and max exact.
#   ``benchmarks/whole_run.py`` (2026-12-06): 122k events/s read at 256 streams x 2 ms at
#   7.6-7.7 us an event (~0.94 of a core), 174-183k at 1,024 with its core full; ITL p99
#   within 0.02 ms of the truth in both.
# Rounded down; raise them when the benchmarks show a faster path. This is the guess before
# a run; each run measures its own cost (``report.client_figures.client_cost``: CPU a token,
# tokens/s a core at it), which ``! client busy`` counts the processes it needs by.
EVENTS_PER_S_BY_CLOCK = {SEGMENT_CLOCK: 100_000, KERNEL_CLOCK: 30_000, USER_CLOCK: 30_000}
EVENTS_PER_S_PER_WORKER = EVENTS_PER_S_BY_CLOCK[KERNEL_CLOCK]  # a clock every process has
# The embedded simulator (one asyncio process): sharing 2 cores with the client, its sends
# stayed on time (truth coalesced < 3 %) up to ~32k token events/s; with a core of its
# own, ~60k. Beyond this its own gaps run late (the truth file shows it).
SIMULATOR_EVENTS_PER_S = 30_000
# Decode speed assumed for a real server when none is given: 5 ms per token event
# (200 tokens/s per stream, a fast GPU server at moderate batch). A slower server asks less.
DEFAULT_ASSUMED_GAP_MS = 5.0
SIMULATOR_DEFAULT_GAP_MS = 2.0  # ``tpot-locust sim --gap-ms`` default


@dataclass(frozen=True)
class Demand:
    """Peak token events/s a scenario asks for, under an assumed per-stream decode rate."""

    events_per_s: float
    assumed_gap_ms: float
    by_class: dict[str, float] = field(default_factory=dict)  # at the peak
    streams: float = 0.0  # concurrent streams at the peak (users x streaming share + ...)

    def workers_needed(self, per_worker: float = EVENTS_PER_S_PER_WORKER) -> int:
        return max(1, math.ceil(self.events_per_s / per_worker))


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity: a container's cpuset, ``taskset``),
    not the machine's: a 2-core cpuset on a 64-core node is 2."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):  # no affinity on this platform
        return os.cpu_count() or 1


def _mean(value: OrZero | None) -> float:
    """Mean of a parsed length or time (``schema``'s); 0 and None (no pause) are 0."""
    return float(value.mean) if isinstance(value, ParsedDistribution) else 0.0


def _streaming_share(traffic: TrafficClass, gap_s: float, tokens: float) -> float:
    """Share of a session's time spent streaming (TTFT taken as 0: an upper bound)."""
    streaming = traffic.turns * tokens * gap_s
    pauses = (traffic.turns - 1) * _mean(traffic.think_time)
    if not traffic.open_loop:
        pauses += _mean(traffic.wait_time)
    total = streaming + pauses
    return streaming / total if total > 0 else 1.0


def _class_demand(
    traffic: TrafficClass, users: float, rate: float, gap_s: float
) -> tuple[float, float]:
    """(events/s, concurrent streams) of one class at a given user count or rate."""
    tokens = _mean(traffic.output_tokens)
    share = _streaming_share(traffic, gap_s, tokens)
    if not traffic.open_loop:
        streams = users * share
        return streams / gap_s, streams
    if traffic.replayed:  # a trace: its tokens over its span (the mean, not the peak)
        requests = traffic.trace_requests
        span_s = max(requests[-1].t_s - requests[0].t_s, 1.0) / traffic.speedup
        events = sum(request.output_tokens for request in requests) / span_s
        return events, events * gap_s
    events = rate * traffic.turns * tokens
    cap = traffic.max_in_flight * share / gap_s
    events = min(events, cap)
    return events, events * gap_s


def _phases(scenario: Scenario) -> list[tuple[float, dict[str, float]]]:
    """(closed-loop users, open-loop rates by class) for the run, or for each stage."""
    base_rates = {t.name: t.rate or 0.0 for t in scenario.classes if t.open_loop}
    if not scenario.stages:
        return [(float(scenario.users), base_rates)]
    phases = []
    users = float(scenario.users)
    for stage in scenario.stages:
        if stage.users is not None:
            users = float(stage.users)
        phases.append(
            (users, {name: stage.rates.get(name, rate) for name, rate in base_rates.items()})
        )
    return phases


def scenario_gap_ms(scenario: Scenario, host: str | None = None) -> float:
    """The gap to assume: the embedded simulator's mean gap when it serves the run (no host
    given here or in the scenario), else ``DEFAULT_ASSUMED_GAP_MS``."""
    if host or scenario.host:
        return DEFAULT_ASSUMED_GAP_MS
    spec = scenario.simulator.gap_ms
    if spec is None:
        return SIMULATOR_DEFAULT_GAP_MS
    return _mean(spec) or SIMULATOR_DEFAULT_GAP_MS


def demand(
    scenario: Scenario, assumed_gap_ms: float | None = None, host: str | None = None
) -> Demand:
    """Peak token events/s the scenario asks for (see the module docstring)."""
    gap_ms = assumed_gap_ms if assumed_gap_ms is not None else scenario_gap_ms(scenario, host)
    if gap_ms <= 0:
        raise ValueError("assumed_gap_ms must be > 0")
    gap_s = gap_ms / 1000
    closed_total = sum(t.users for t in scenario.classes if not t.open_loop)
    burst_events = burst_streams = 0.0
    for burst in scenario.bursts:  # the largest burst, all its requests streaming at once
        if burst.count / gap_s > burst_events:
            burst_events, burst_streams = burst.count / gap_s, float(burst.count)
    best = Demand(0.0, gap_ms)
    for users, rates in _phases(scenario):
        by_class: dict[str, float] = {}
        streams = 0.0
        for traffic in scenario.classes:
            class_users = 0.0
            if not traffic.open_loop and closed_total:
                class_users = users * traffic.users / closed_total
            events, class_streams = _class_demand(
                traffic, class_users, rates.get(traffic.name, 0.0), gap_s
            )
            by_class[traffic.name] = events
            streams += class_streams
        total = sum(by_class.values()) + burst_events
        if total > best.events_per_s:
            best = Demand(total, gap_ms, by_class, streams + burst_streams)
    return best


def expected_events_per_s(
    scenario: Scenario, assumed_gap_ms: float | None = None, host: str | None = None
) -> float:
    """Peak token events/s the scenario will ask for at ``assumed_gap_ms`` per token event
    (default: the embedded simulator's gap when it serves the run, else 5 ms)."""
    return demand(scenario, assumed_gap_ms, host).events_per_s


def workers_needed(
    scenario: Scenario, assumed_gap_ms: float | None = None, host: str | None = None
) -> int:
    """Worker processes needed to stamp the scenario's peak truthfully (at least 1)."""
    return demand(scenario, assumed_gap_ms, host).workers_needed()


def advice(
    scenario: Scenario,
    workers: int,
    *,
    host: str | None = None,
    assumed_gap_ms: float | None = None,
    cpus: int | None = None,
    clock: str = KERNEL_CLOCK,
) -> str | None:
    """A one-line warning when the run asks more than its processes can stamp, else None.

    ``workers`` as ``tpot-locust run --workers`` (0: one local process). ``host``: the
    ``--host`` given on the command line, if any; without one here or in the scenario the
    embedded simulator serves the run (its gap is assumed, its own limit checked, and it
    takes a core). Local workers beyond this machine's cores (``cpus``, default
    ``usable_cpus``) add no capacity. ``clock``: the arrival clock the processes stamp
    on (their capacity is that clock's, ``EVENTS_PER_S_BY_CLOCK``).
    """
    need = demand(scenario, assumed_gap_ms, host)
    simulated = not (host or scenario.host)
    cpus = cpus if cpus is not None else usable_cpus()
    free_cores = max(1, cpus - (1 if simulated else 0))  # the simulator takes one
    processes = max(1, workers)
    usable = min(processes, free_cores)
    per_worker = EVENTS_PER_S_BY_CLOCK.get(clock, EVENTS_PER_S_PER_WORKER)
    capacity = usable * per_worker
    problems = []
    if need.events_per_s > capacity:
        if workers <= 0:
            text = "one process stamps"
        elif workers == 1:
            text = "1 worker process stamps"
        else:
            text = f"{workers} worker processes stamp"
        text += f" ~{capacity:,.0f} token events/s truthfully on the {clock} clock"
        if usable < processes:
            text += f" (only {usable} with a core of its own)"
        needed = need.workers_needed(per_worker)
        text += f": it needs {needed} worker processes with a core each"
        if needed <= free_cores:
            text += f" (--workers {needed})"
        else:
            spare = ", one runs the simulator" if simulated else ""
            text += (
                f", more than this machine's {cpus} cores{spare}: spread workers over "
                "machines (docs/distributed.md, Distributed runs)"
            )
        problems.append(text)
    if simulated and need.events_per_s > SIMULATOR_EVENTS_PER_S:
        problems.append(
            f"the embedded simulator sends at most ~{SIMULATOR_EVENTS_PER_S:,} token events/s "
            "(one process): beyond that its own gaps run late (the truth file shows them)"
        )
    if not problems:
        return None
    return (
        f"tpot-locust: warning: this scenario may ask ~{need.events_per_s:,.0f} token events/s "
        f"(~{need.streams:,.0f} streams at an assumed {need.assumed_gap_ms:g} ms per token); "
        + "; ".join(problems)
    )


AUTO_WORKERS = -1  # ``--workers auto``, until ``auto_workers`` resolves it for a scenario


def auto_workers(
    scenario: Scenario, host: str | None = None, cpus: int | None = None
) -> tuple[int, str]:
    """``--workers auto``: one worker a core, less one for the master and one for the
    embedded simulator when it serves the run; under two such workers, one local process
    (a master and one worker would take two cores for one's stamping). Returns the count
    and a line that says how it was chosen."""
    cpus = cpus if cpus is not None else usable_cpus()
    simulated = not (host or scenario.host)
    kept = 1 + (1 if simulated else 0)
    workers = cpus - kept
    for_whom = "the master and the embedded simulator" if simulated else "the master"
    cores = f"{cpus} core{'s' * (cpus != 1)}, {kept} kept for {for_whom}"
    if workers < 2:
        return 0, f"tpot-locust: --workers auto: one local process ({cores}: too few for workers)"
    return workers, f"tpot-locust: --workers auto: {workers} worker processes ({cores})"


__all__ = [
    "AUTO_WORKERS",
    "DEFAULT_ASSUMED_GAP_MS",
    "EVENTS_PER_S_BY_CLOCK",
    "EVENTS_PER_S_PER_WORKER",
    "SIMULATOR_EVENTS_PER_S",
    "Demand",
    "advice",
    "auto_workers",
    "demand",
    "expected_events_per_s",
    "scenario_gap_ms",
    "workers_needed",
]
