"""One process's run: its recorder, collector, traffic driver and the end-of-run results.

A Locust process holds one ``RunState`` (created by ``listeners.get_state``); the listeners
call into it at Locust's lifecycle events. What it reads of Locust's options:
``run_options``; the server's samplers while a test runs: ``sampling``.
"""

from __future__ import annotations

import logging
import sys
import time
from dataclasses import replace
from typing import Any

import gevent
from locust.env import Environment

from tpot_locust.common import env_vars
from tpot_locust.common.results_folder import ResultsFolder
from tpot_locust.common.run_facts import RunFacts
from tpot_locust.harness.load.scenario_in_use import ScenarioInUse
from tpot_locust.harness.load.traffic import ProcessShare, TrafficDriver
from tpot_locust.harness.run.roles import LocalRole, Role, choose_role
from tpot_locust.harness.run.run_facts_of import run_facts_of
from tpot_locust.harness.run.run_options import (
    is_headless,
    report_interval_s,
    results_folder,
    slo_of,
)
from tpot_locust.harness.run.run_ticks import RunTicks
from tpot_locust.harness.users.failures import ClientErrorStreak
from tpot_locust.harness.users.user_context import user_context
from tpot_locust.harness.watch.gc_watch import CollectorWatch
from tpot_locust.harness.watch.loop_probe import LagProbe
from tpot_locust.harness.watch.sampling import ServerSampling
from tpot_locust.metrics.causes import CauseWindow, PrefillArchive
from tpot_locust.metrics.collector import Collector
from tpot_locust.metrics.metric_set import MetricSet
from tpot_locust.metrics.phases import RunClock
from tpot_locust.metrics.recorder import Recorder
from tpot_locust.report.checkpoint import Checkpoint
from tpot_locust.report.finishing import finish_run, guarded
from tpot_locust.report.first_screen import first_screen
from tpot_locust.report.gate import EXIT_INVALID
from tpot_locust.report.histograms_file import write_histograms
from tpot_locust.report.progress import ProgressPrinter
from tpot_locust.report.summary import format_full_report
from tpot_locust.report.summary_types import Summary, Verdict
from tpot_locust.report.verdict_files import format_verdict
from tpot_locust.scenario.loader import ScenarioError, split_settings
from tpot_locust.scenario.model import Server
from tpot_locust.scenario.slo import SloSpec

logger = logging.getLogger(__name__)


class RunState:
    """This process's recorder and, on a master or local runner, the collector; its part
    in the run (``roles``) chosen once, when it attaches to Locust's runner."""

    def __init__(self, environment: Environment, scenario: ScenarioInUse | None = None) -> None:
        self.environment = environment
        self.scenario = scenario  # the scenario locustfile's (None: a plain locustfile)
        self.recorder = Recorder()
        self.probe = LagProbe(self.recorder.on_stall)  # this process's loop, once it streams
        self.recorder.probe = self.probe
        self.collections = CollectorWatch()  # names the stalls the collector caused
        self.recorder.collections = self.collections
        # what this run hands its users: their process share, the recorder's live counts
        self.users = user_context(environment)
        self.users.live_streams = self.recorder.token_flow
        self.collector = Collector()
        self.role: Role = LocalRole()  # until it attaches
        self.summary: Summary | None = None
        self.running = False
        self.driver: TrafficDriver | None = None
        self.sampling = ServerSampling(self._server_windows)  # the server's own, while a test runs
        self.gpu_samplers = self.sampling.gpu_samplers  # stopped apart at the finish
        self.progress: ProgressPrinter | None = None
        self.client_errors = ClientErrorStreak(self.stop_run)
        self.stopped_because: str | None = None
        self.slo: SloSpec | None = None
        self.verdict: Verdict | None = None
        self.tests_started = 0
        self.reported = False  # this test's report was printed already (web UI: at its stop)
        self.ticks = RunTicks(self)  # every interval: totals, time series, progress, live page
        self.checkpoint: Checkpoint | None = None  # the totals on disk as they go (not a worker)

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
        self.recorder.goodput = spec.goodput if spec is not None else None
        self.recorder.pace = spec.pace if spec is not None else None

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
        self.recorder.causes.archive = PrefillArchive()
        server = self.scenario.scenario.server if self.scenario is not None else Server()
        self.sampling.start(server, self.environment.host, self.folder)
        self.collector.start(self.folder)
        folder = self.folder
        self.checkpoint = Checkpoint(folder) if folder is not None else None
        self.summary = None
        self.running = True
        self.ticks.publish_live()
        options = self.environment.parsed_options
        settings = split_settings(getattr(options, "tpot_set", None))
        if settings:  # this test's only: the web form's next Start does not send the field
            assert options is not None  # the settings came from it
            options.tpot_set = ""
        self._use_test_settings(settings)
        in_use = self.scenario
        if in_use is not None and getattr(options, "headless", False):
            self.progress = ProgressPrinter(in_use.scenario.duration_s, in_use.scenario.warmup_s)
        start_wall_ns = time.time_ns()
        self.role.begin_test(self, start_wall_ns, settings)
        self.ticks.start()

    def _server_windows(self, windows: list[CauseWindow]) -> None:
        for window in windows:
            self.recorder.causes.add(window)

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
        except (ScenarioError, ValueError) as error:
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
        self.recorder.clock = self.run_clock(share.start_wall_ns)
        self.end_traffic()
        self.driver = TrafficDriver(self.environment, scenario, classes, share, self.recorder)
        self.driver.start()

    def run_clock(self, start_wall_ns: int) -> RunClock | None:
        """The run's timeline from ``start_wall_ns`` (None: no scenario)."""
        in_use = self.scenario
        if in_use is None:
            return None
        scenario = in_use.scenario
        return RunClock(start_wall_ns, scenario.duration_s, scenario.warmup_s, scenario.cooldown_s)

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
        if folder is not None and env_vars.is_set(env_vars.SUPERVISED) and self.headless:
            # tpot-locust run finishes the run, with the simulator's truth: its input only
            # (a test of its --web session finishes here, as plain Locust's does)
            saving = lambda: write_histograms(folder, totals, run)  # noqa: E731
            if guarded(errors, "histograms", saving) or errors:
                self.environment.process_exit_code = EXIT_INVALID
            elif missing_workers:
                self.environment.process_exit_code = 1
            if not folder.histograms.exists():  # a full disk: nothing to finish, shown here
                self._print_unsaved(totals, run, errors)
            self.summary = None
            return None
        name = run.scenario or "run"
        finished = finish_run(folder, totals, run, slo=self.slo, suite=name)
        summary = self.summary = finished.summary
        self.verdict = finished.verdict
        earlier = 1 if missing_workers else self.environment.process_exit_code
        self.environment.process_exit_code = finished.exit_code(earlier)
        if report_error := summary.get("report_error"):
            print(
                f"tpot-locust: the report is incomplete: {report_error}",
                file=sys.stderr,
                flush=True,
            )
        if not self.headless and self.environment.runner is not None:
            guarded([], "report", self.print_report)  # a web-UI test: its own, now
        return summary

    def _print_unsaved(self, totals: MetricSet, run: RunFacts, errors: list[str]) -> None:
        """The run's figures on the terminal where its results could not be saved (a full
        disk): what was measured is not lost with the files."""
        unsaved = "; ".join(errors) or "histograms.json is missing"
        finished = finish_run(None, totals, replace(run, report_error=unsaved))
        print("\n" + format_full_report(finished.summary), flush=True)
        print(f"tpot-locust: the results could not be saved: {unsaved}", file=sys.stderr)

    def print_report(self) -> None:
        """The end-of-test report and the SLO verdict, once per test (under ``tpot-locust
        run`` it prints them, after its truth check)."""
        summary = self.summary
        if summary is None or self.reported:
            return
        self.reported = True
        requests = summary["requests"]
        if requests["ok"] or requests["failed"] or requests["interrupted"]:
            folder = self.folder
            text = folder.report_text if folder is not None else None
            html = folder.report if folder is not None else None
            screen = first_screen(
                summary,
                text if text and text.exists() else None,
                html if html and html.exists() else None,
            )
            print("\n" + "\n".join(screen), flush=True)
        if self.verdict is not None:
            print("\n" + "\n".join(format_verdict(self.verdict)), flush=True)

    def stall_record(self) -> dict[str, Any]:
        """This process's stall windows, as saved (``OUT/client_stalls/local.json``, or a
        worker's ``OUT/workers/<id>.json``)."""
        return self.recorder.stalls.to_record(self.probe.threshold_ns / 1e6)

    def save_checkpoint(self) -> None:
        """The totals and facts as they stand, on disk (``report.checkpoint``)."""
        if self.checkpoint is not None and self.running:
            self.checkpoint.save(self.collector.totals, self.run_info)

    def run_info(self) -> RunFacts:
        """The run's facts as they stand (``run_facts_of``)."""
        return run_facts_of(self)

    def reset(self) -> None:
        """Locust's Reset Stats: ours restart too, the time series with the totals (the
        run's clock and its interval logs go on)."""
        self.recorder.reset()
        self.collector.reset_totals()
