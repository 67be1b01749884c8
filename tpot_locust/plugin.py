"""Wires the recorder into Locust: one per process, deltas from workers, the final report.

Importing ``tpot_locust.users`` registers these listeners on Locust's global ``events`` (as
a locustfile's own listeners would be), so ``locust -f locustfiles/chat.py`` records and
reports the same histograms as ``tpot-locust run``, alone or as master and workers.
"""

from __future__ import annotations

import gc
import logging
import os
import time
from pathlib import Path
from typing import Any

import gevent
import locust.runners
from locust import events
from locust.env import Environment
from locust.runners import MasterRunner, WorkerRunner

from tpot_locust import webui
from tpot_locust.collector import Collector
from tpot_locust.distributed import MasterLink, WorkerLink
from tpot_locust.events import ensure_token_timings
from tpot_locust.histograms import limit_heap_fragmentation
from tpot_locust.phases import RunClock
from tpot_locust.progress import ProgressPrinter
from tpot_locust.recorder import Recorder
from tpot_locust.report import build_summary, format_full_report, write_results
from tpot_locust.scenario import Scenario
from tpot_locust.traffic import ProcessShare, TrafficDriver

logger = logging.getLogger(__name__)
DEFAULT_REPORT_INTERVAL_S = 1.0
_STATES: list[RunState] = []
_SCENARIO: tuple[Scenario, dict[str, type]] | None = None


def use_scenario(scenario: Scenario, classes: dict[str, type]) -> None:
    """Called by the scenario locustfile: open-loop classes, bursts and phases come from it."""
    global _SCENARIO
    _SCENARIO = (scenario, classes)


class RunState:
    """This process's recorder and, on a master or local runner, the collector."""

    def __init__(self, environment: Environment) -> None:
        self.environment = environment
        self.recorder = Recorder()
        self.collector = Collector()
        self.master: MasterLink | None = None
        self.worker: WorkerLink | None = None
        self.ticker: gevent.Greenlet | None = None
        self.summary: dict[str, Any] | None = None
        self.running = False
        self.driver: TrafficDriver | None = None
        self.progress: ProgressPrinter | None = None

    @property
    def out_dir(self) -> Path | None:
        out = getattr(self.environment.parsed_options, "tpot_out", None)
        return Path(out) if out else None

    @property
    def interval_s(self) -> float:
        value = getattr(self.environment.parsed_options, "tpot_report_interval", None)
        return float(value or DEFAULT_REPORT_INTERVAL_S)

    def _users(self) -> int:
        runner = self.environment.runner
        return runner.user_count if runner is not None else 0

    def _tick(self, final: bool = False) -> None:
        if self.master is None:
            self.collector.add_delta(self.recorder.take_interval(final=final))
        self.collector.tick(self._users() + (self.driver.in_flight if self.driver else 0))
        if self.progress is not None and not final:
            self.progress.maybe_print(self.collector)

    def _tick_forever(self) -> None:
        while True:
            gevent.sleep(self.interval_s)
            self._tick()

    def start(self) -> None:
        self.stop_ticker()
        self.recorder.reset()
        self.recorder.windows.clear()
        self.collector.start(self.out_dir)
        self.summary = None
        self.running = True
        options = self.environment.parsed_options
        if _SCENARIO is not None and getattr(options, "headless", False):
            self.progress = ProgressPrinter(_SCENARIO[0].duration_s)
        start_wall_ns = time.time_ns()
        if self.master is not None:
            self.master.reset()
            self.master.send_plans(start_wall_ns)
        else:
            self.begin_traffic(ProcessShare(0, 1, start_wall_ns))
        self.ticker = gevent.spawn(self._tick_forever)

    def begin_traffic(self, share: ProcessShare) -> None:
        """This process's part of a scenario: its clock, open-loop share and bursts."""
        if _SCENARIO is None:
            return
        scenario, classes = _SCENARIO
        self.recorder.clock = RunClock(
            share.start_wall_ns, scenario.duration_s, scenario.warmup_s, scenario.cooldown_s
        )
        self.end_traffic()
        publish = self.worker.publish_window if self.worker else self.recorder.windows.update
        self.driver = TrafficDriver(
            self.environment, scenario, classes, share, publish, self.recorder.count_dropped
        )
        self.driver.start()

    def end_traffic(self) -> None:
        if self.driver is not None:
            self.driver.stop(self.environment.stop_timeout or 0)
            self.driver = None

    def stop_ticker(self) -> None:
        if self.ticker is not None:
            self.ticker.kill(block=True)
            self.ticker = None

    def finish(self) -> dict[str, Any]:
        """Collect every final delta, close the last interval, write the results."""
        self.end_traffic()
        if self.master is not None:
            self.master.flush()
        self.stop_ticker()
        self._tick(final=True)
        self.collector.close()
        self.running = False
        run = self.run_info()
        if self.out_dir is not None:
            self.summary = write_results(self.out_dir, self.collector.totals, run)
        else:
            self.summary = build_summary(self.collector.totals, run)
        if self.master is not None and self.master.missing():
            self.environment.process_exit_code = 1  # an incomplete measurement must not pass
        return self.summary

    def run_info(self) -> dict[str, Any]:
        options = self.environment.parsed_options
        info: dict[str, Any] = {"host": self.environment.host, "complete": True}
        if options is not None:
            info["scenario"] = getattr(options, "tpot_scenario_name", None)
        info["report_interval_s"] = self.interval_s
        if self.master is not None:
            workers = self.master.summary()
            info["workers"] = workers
            info["complete"] = not workers["missing"]
        info["timeseries"] = self.collector.timeseries
        info["bursts"] = {
            "windows": len(self.recorder.windows),
            "prefill_s": sorted(round(d, 3) for d in self.recorder.windows.durations_s()),
        }
        if self.recorder.clock is not None:
            info["warmup_s"] = self.recorder.clock.warmup_s
            info["cooldown_s"] = self.recorder.clock.cooldown_s
        return info

    def reset(self) -> None:
        """Locust's Reset Stats: ours restart too (the timeline keeps its clock)."""
        self.recorder.reset()
        self.collector.totals = type(self.collector.totals)()
        self.collector.pending = type(self.collector.pending)()


def get_state(environment: Environment) -> RunState:
    state = getattr(environment, "tpot_state", None)
    if state is None:
        state = RunState(environment)
        environment.tpot_state = state
        _STATES.append(state)
        ensure_token_timings(environment.events).add_listener(state.recorder.record)
    return state


@events.init_command_line_parser.add_listener
def _add_arguments(parser: Any, **_: Any) -> None:
    group = parser.add_argument_group("tpot-locust")
    group.add_argument(
        "--tpot-out",
        default=os.environ.get("TPOT_OUT"),
        help="directory for summary.json, histograms.json and interval logs (env TPOT_OUT)",
    )
    group.add_argument(
        "--tpot-report-interval",
        type=float,
        default=float(os.environ.get("TPOT_REPORT_INTERVAL", DEFAULT_REPORT_INTERVAL_S)),
        help="seconds between worker reports and time-series points (default 1)",
    )
    group.add_argument(
        "--tpot-scenario-name", default=os.environ.get("TPOT_SCENARIO_NAME"), help="run label"
    )


@events.init.add_listener
def _on_init(environment: Environment, **_: Any) -> None:
    limit_heap_fragmentation()
    state = get_state(environment)
    # Locust re-reads this module global on every report loop.
    locust.runners.WORKER_REPORT_INTERVAL = state.interval_s
    runner = environment.runner
    if isinstance(runner, WorkerRunner):
        state.worker = WorkerLink(state, runner)
    elif isinstance(runner, MasterRunner):
        state.master = MasterLink(state, runner)
    if not isinstance(runner, WorkerRunner):
        webui.install(environment, state)


def quiet_garbage_collector() -> None:
    """Keep full GC passes off the stamping path.

    A full (gen 2) collection walked every object of Locust, gevent and numpy and paused
    the event loop for ~31 ms (measured), which showed up as false 30-40 ms token gaps.
    Objects alive at test start are frozen out of collection; the rest collect as usual.
    """
    gc.collect()
    gc.freeze()


@events.test_start.add_listener
def _on_test_start(environment: Environment, **_: Any) -> None:
    quiet_garbage_collector()
    if not isinstance(environment.runner, WorkerRunner):
        get_state(environment).start()


@events.test_stop.add_listener
def _on_test_stop(environment: Environment, **_: Any) -> None:
    state = get_state(environment)
    if isinstance(environment.runner, WorkerRunner):
        state.end_traffic()
        return
    if state.running:
        state.finish()


@events.reset_stats.add_listener
def _on_reset_stats(**_: Any) -> None:
    # Locust's reset_stats event carries no environment; reset every state we know.
    for state in _STATES:
        state.reset()


@events.quitting.add_listener
def _on_quitting(environment: Environment, **_: Any) -> None:
    state = get_state(environment)
    if state.worker is not None:
        if state.out_dir is not None:
            state.worker.write_audit(state.out_dir)
        return
    summary = state.finish() if state.running else state.summary
    if summary is None:
        return

    @environment.events.quit.add_listener
    def _print_report(**_: Any) -> None:
        if summary["requests"]["ok"] or summary["requests"]["failed"]:
            print("\n" + format_full_report(summary), flush=True)
