"""One process's run: its recorder, collector, traffic driver and the end-of-run results.

A Locust process holds one ``RunState`` (created by ``listeners.get_state``); the listeners
call into it at Locust's lifecycle events. What it reads of Locust's options:
``run_options``; the server's samplers while a test runs: ``sampling``.
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from typing import Any

import gevent
from locust.env import Environment

from tpot_locust.common.results_folder import ResultsFolder
from tpot_locust.common.run_facts import RunFacts
from tpot_locust.harness.load.scenario_in_use import ScenarioInUse
from tpot_locust.harness.load.traffic import ProcessShare, TrafficDriver
from tpot_locust.harness.run.process_parts import build_parts
from tpot_locust.harness.run.roles import LocalRole, Role, choose_role
from tpot_locust.harness.run.run_facts_of import run_facts_of
from tpot_locust.harness.run.run_options import (
    is_headless,
    is_supervised,
    report_interval_s,
    results_folder,
    slo_of,
    take_test_settings,
)
from tpot_locust.harness.run.run_ticks import RunTicks
from tpot_locust.metrics.phases import RunClock
from tpot_locust.report.finishing import guarded
from tpot_locust.report.progress import ProgressPrinter
from tpot_locust.report.run_end import finish_here, hand_over, print_test_report
from tpot_locust.report.summary_types import Summary, Verdict
from tpot_locust.scenario.slo import SloSpec

logger = logging.getLogger(__name__)


class RunState:
    """This process's recorder and, on a master or local runner, the collector; its part
    in the run (``roles``) chosen once, when it attaches to Locust's runner."""

    def __init__(self, environment: Environment, scenario: ScenarioInUse | None = None) -> None:
        self.environment = environment
        self.scenario = scenario  # the scenario locustfile's (None: a plain locustfile)
        parts = build_parts(environment, self.stop_run)  # built whole (``process_parts``)
        self.probe, self.collections, self.recorder = parts.probe, parts.collections, parts.recorder
        self.collector, self.sampling, self.users = parts.collector, parts.sampling, parts.users
        self.client_errors = parts.client_errors
        self.gpu_samplers = self.sampling.gpu_samplers  # stopped apart at the finish
        self.role: Role = LocalRole()  # until it attaches
        self.summary: Summary | None = None
        self.running = False
        self.driver: TrafficDriver | None = None
        self.stopped_because: str | None = None
        self.slo: SloSpec | None = None
        self.verdict: Verdict | None = None
        self.tests_started = 0
        self.reported = False  # this test's report was printed already (web UI: at its stop)
        self.ticks = RunTicks(self)  # every interval: totals, time series, progress, live page

    def attach(self, runner: Any) -> Role:
        """Take this process's part in the run, linked to its master or workers."""
        self.role = choose_role(runner, self)
        return self.role

    def begin_worker_test(self, share: ProcessShare, settings: list[str]) -> None:
        """A worker's test, at its master's plan."""
        self.client_errors.reset()
        self._use_test_settings(settings)
        self.begin_traffic(share)

    def use_slo(self, spec: SloSpec | None) -> None:
        """Gate on ``spec`` at the end; its per-request limits count goodput here too."""
        self.slo = spec
        goodput, pace = (spec.goodput, spec.pace) if spec is not None else (None, None)
        self.recorder.rules = replace(self.recorder.rules, goodput=goodput, pace=pace)

    @property
    def folder(self) -> ResultsFolder | None:
        """This test's results folder (``run_options.results_folder``)."""
        return results_folder(self.environment.parsed_options, self.tests_started)

    @property
    def headless(self) -> bool:
        return is_headless(self.environment.parsed_options)

    @property
    def interval_s(self) -> float:
        return report_interval_s(self.environment.parsed_options)

    def stop_run(self, reason: str) -> None:
        """End the run early (exit code 1) because it cannot measure anything; a worker
        asks its master, which stops every worker."""
        if self.role.ask_to_stop(reason):
            return
        if self.stopped_because is not None:
            return
        self.stopped_because = reason
        logger.error("tpot-locust: %s", reason)
        self.environment.process_exit_code = 1
        runner = self.environment.runner
        if runner is not None:
            headless = getattr(self.environment.parsed_options, "headless", False)
            gevent.spawn(runner.quit if headless else runner.stop)

    def start(self) -> None:
        self.client_errors.reset()
        self.verdict = None
        self.tests_started += 1
        self.reported = False
        self.stopped_because = None
        self.ticks.stop()
        self.recorder.reset()
        self.recorder.causes.clear()
        # the reporting process (a worker's tests begin at its master's plan) keeps every
        # prefill, to draw them
        self.recorder.causes.keep_prefills()
        in_use, folder = self.scenario, self.folder
        server = in_use.scenario.server if in_use is not None else None
        self.sampling.start(server, self.environment.host, folder)
        self.collector.start(folder)
        self.summary = None
        self.running = True
        self.ticks.publish_live()
        settings = take_test_settings(self.environment.parsed_options)
        self._use_test_settings(settings)
        progress = None
        if in_use is not None and self.headless:
            progress = ProgressPrinter(in_use.scenario.duration_s, in_use.scenario.warmup_s)
        self.ticks.begin_test(folder, progress)
        start_wall_ns = time.time_ns()
        self.role.begin_test(self, start_wall_ns, settings)
        self.ticks.start()

    def _use_test_settings(self, settings: list[str]) -> None:
        """This test's own scenario settings (``--tpot-set``: a sweep's step on a running
        session); ones it cannot take end the test, named."""
        in_use = self.scenario
        if in_use is None:
            if settings:
                self.stop_run("--tpot-set needs the scenario locustfile (TPOT_SCENARIO)")
            return
        try:
            changed = in_use.use_settings(settings)
        except ValueError as error:  # a ScenarioError too
            self.stop_run(f"--tpot-set: {error}")
            return
        if changed and self.role.reports:
            self.use_slo(slo_of(self.environment.parsed_options, in_use))

    def begin_traffic(self, share: ProcessShare) -> None:
        """This process's part of a scenario: its clock, open-loop share and bursts."""
        self.users.process_share = (share.index, share.count)  # sequential datasets' share
        in_use = self.scenario
        if in_use is None:
            return
        scenario, classes = in_use.scenario, in_use.classes
        clock = self.run_clock(share.start_wall_ns)
        self.recorder.rules = replace(self.recorder.rules, clock=clock)
        self.end_traffic()
        self.driver = TrafficDriver(self.environment, scenario, classes, share, self.recorder)
        self.driver.start()

    def run_clock(self, start_wall_ns: int) -> RunClock | None:
        """The run's timeline from ``start_wall_ns`` (None: no scenario)."""
        return self.scenario.run_clock(start_wall_ns) if self.scenario is not None else None

    def end_traffic(self) -> None:
        if self.driver is not None:
            self.driver.stop(self.environment.stop_timeout or 0)
            self.driver = None

    def finish(self) -> Summary | None:
        """Collect every final delta, close the last interval, then the finishing pass
        (``report.finishing``): here, or, under ``tpot-locust run``, in it (this process
        saves ``histograms.json`` for it). Returns the summary (None: made elsewhere).

        Each step runs in its own guard: one that fails (a bad value from a server, a full
        disk) is named in the summary's ``report_error`` and the run exits 3, while every
        other part (histograms.json first) is still written."""
        errors: list[str] = []
        guarded(errors, "traffic stop", self.end_traffic)
        self.role.flush_workers(errors)
        server_metrics = guarded(errors, "server metrics", self.sampling.stop_server)
        gpu_metrics = guarded(errors, "gpu metrics", self.gpu_samplers.stop)
        guarded(errors, "ticker stop", self.ticks.stop)
        guarded(errors, "time series", lambda: self.ticks.tick(final=True))
        if self.collector.logs is not None and (failed := self.collector.logs.error):
            errors.append(f"interval logs: {failed}")
        guarded(errors, "interval logs", self.collector.close)
        self.running = False
        self.ticks.publish_live()  # the test's last totals, no longer running
        run = guarded(errors, "run facts", self.run_info) or RunFacts(complete=False)
        run = replace(run, server_metrics=server_metrics, gpu_metrics=gpu_metrics)
        folder, totals = self.folder, self.collector.totals
        if folder is not None:
            guarded(errors, "client stalls", lambda: self.role.save_own_record(self, folder))
        if errors:
            run = replace(run, report_error="; ".join(errors))
        missing_workers = bool(self.role.missing_workers())
        if folder is not None and is_supervised() and self.headless:
            # tpot-locust run finishes the run, with the simulator's truth: its input only
            # (a test of its --web session finishes here, as plain Locust's does)
            code = hand_over(folder, totals, run, errors, missing_workers)
            if code is not None:
                self.environment.process_exit_code = code
            self.summary = None
            return None
        finished = finish_here(folder, totals, run, self.slo)
        summary = self.summary = finished.summary
        self.verdict = finished.verdict
        earlier = 1 if missing_workers else self.environment.process_exit_code
        self.environment.process_exit_code = finished.exit_code(earlier)
        if not self.headless and self.environment.runner is not None:
            guarded([], "report", self.print_report)  # a web-UI test: its own, now
        return summary

    def print_report(self) -> None:
        """The end-of-test report and the SLO verdict, once per test (under ``tpot-locust
        run`` it prints them, after its truth check)."""
        if self.summary is None or self.reported:
            return
        self.reported = True
        print_test_report(self.summary, self.folder, self.verdict)

    def stall_record(self) -> dict[str, Any]:
        """This process's stall windows, as saved (``OUT/client_stalls/local.json``, or a
        worker's ``OUT/workers/<id>.json``)."""
        return self.recorder.stalls.to_record(self.probe.threshold_ns / 1e6)

    def run_info(self) -> RunFacts:
        """The run's facts as they stand (``run_facts_of``)."""
        return run_facts_of(self)

    def reset(self) -> None:
        """Locust's Reset Stats: ours restart too, the time series with the totals (the
        run's clock and its interval logs go on)."""
        self.recorder.reset()
        self.collector.reset_totals()
