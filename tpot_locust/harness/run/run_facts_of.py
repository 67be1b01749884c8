"""The run's facts (``common.run_facts.RunFacts``) gathered from one process's run: what
ran, against what, for how long, measured in which window and read how. Apart from
``RunState`` because it only reads it: every part of the run has its say here once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from tpot_locust.common.clock import SEGMENT_CLOCK
from tpot_locust.common.run_facts import Prefill, RunFacts
from tpot_locust.common.secrets import redact_url
from tpot_locust.common.version import __version__
from tpot_locust.metrics.phases import NO_END_NS
from tpot_locust.wire.loop_reads import read_batch_s
from tpot_locust.wire.segment_stamps import arrival_clock

if TYPE_CHECKING:
    from locust.env import Environment

    from tpot_locust.harness.load.scenario_in_use import ScenarioInUse
    from tpot_locust.harness.run.roles import Role
    from tpot_locust.harness.watch.loop_probe import LagProbe
    from tpot_locust.metrics.collector import Collector
    from tpot_locust.metrics.recorder import Recorder
    from tpot_locust.scenario.slo import SloSpec


class RunParts(Protocol):
    """What the facts are read from (a ``RunState``)."""

    environment: Environment
    recorder: Recorder
    collector: Collector
    probe: LagProbe
    role: Role
    scenario: ScenarioInUse | None
    slo: SloSpec | None
    stopped_because: str | None
    tests_started: int

    @property
    def interval_s(self) -> float: ...


# The facts ``run_info`` writes even when None (``"users": null``): the same bytes as ever.
ALWAYS_WRITTEN = frozenset(
    {"host", "complete", "version", "users", "scenario", "report_interval_s", "start_wall_s"}
    | {"stopped_because", "stall_threshold_ms", "arrival_clock", "read_batch_ms", "timeseries"}
)


def run_facts_of(state: RunParts) -> RunFacts:
    """``state``'s facts now (a master's with its workers' summary)."""
    options = state.environment.parsed_options
    in_use = state.scenario
    scenario = getattr(options, "tpot_scenario_name", None) if options is not None else None
    if not scenario and in_use is not None:
        scenario = in_use.scenario.name
    named = options is not None or in_use is not None  # else no "scenario" (a library's)
    slo, workers, clock = state.slo, state.role.workers_summary(), state.recorder.rules.clock
    clock_name = arrival_clock()  # the master's: workers started with another may differ
    start_ns = state.collector.start_wall_s * 1e9
    bursts = state.recorder.causes.bursts
    prefill: Prefill | None = None
    if (archive := state.recorder.causes.archive) is not None:
        prefill = {  # every request's prefill (send to first token), all processes
            "windows": len(archive),
            "long_prompt_tokens": state.recorder.causes.long_prompt_tokens,
            # [seconds since the time series' start, most prompt tokens in prefill]
            "tokens_s": archive.tokens_series(int(start_ns)),
        }
    window_start, window_end = state.recorder.window_ns()
    window = None  # the window in token time (metrics.md), when it has an edge
    windows = None  # each measuring process's own (a worker's closes at its own stop),
    if window_start or window_end != NO_END_NS:  # by its request ids' prefix: truth
        window = [window_start, window_end]
        windows = state.role.windows(window_start, window_end)
    return RunFacts(
        host=redact_url(state.environment.host),
        complete=not workers["missing"] if workers is not None else True,
        version=__version__,
        users=getattr(options, "num_users", None),
        scenario=scenario,
        settings=list(in_use.settings) if in_use is not None and in_use.settings else None,
        report_interval_s=state.interval_s,
        start_wall_s=state.collector.start_wall_s,
        stopped_because=state.stopped_because,
        stall_threshold_ms=state.probe.threshold_ns / 1e6,
        goodput_limits_ms=None if slo is None or slo.goodput is None else slo.goodput.as_ms(),
        pace_ms=None if slo is None or slo.pace is None else slo.pace.as_ms(),
        arrival_clock=clock_name,
        read_batch_ms=read_batch_s() * 1000 if clock_name == SEGMENT_CLOCK else 0.0,
        workers=workers,
        timeseries=state.collector.timeseries,
        bursts={
            "windows": len(bursts),
            "failed": bursts.failed,  # no first token: no prefill, no window
            "prefill_s": sorted(round(d, 3) for d in bursts.durations_s()),
            # seconds since the time series' start, to shade on its charts
            "spans_s": [
                [round((start - start_ns) / 1e9, 3), round((end - start_ns) / 1e9, 3)]
                for start, end in bursts.spans_wall_ns()
            ],
        },
        prefill=prefill,
        test=state.tests_started if state.tests_started > 1 else None,  # of this web UI
        warmup_s=None if clock is None else clock.warmup_s,
        cooldown_s=None if clock is None else clock.cooldown_s,
        duration_s=None if clock is None else clock.duration_s,
        clock_start_wall_ns=None if clock is None else clock.start_wall_ns,
        window_wall_ns=window,
        process_windows_wall_ns=windows,
        nulls_kept=ALWAYS_WRITTEN if named else ALWAYS_WRITTEN - {"scenario"},
    )
