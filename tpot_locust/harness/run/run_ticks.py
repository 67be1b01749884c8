"""The run's clockwork: every report interval, this process's new samples into the totals
(a master's come from its workers' reports), the time series' next point, the progress line,
the checkpoint and the live metrics page. Stopped only between two ticks: a tick yields (so
stamping goes on), and one killed halfway had moved its interval into the totals but not the
time series.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Protocol

import gevent
from gevent.event import Event

from tpot_locust.common.results_folder import ResultsFolder
from tpot_locust.common.run_facts import RunFacts
from tpot_locust.harness.run.metrics_endpoint import MetricsEndpoint
from tpot_locust.report.checkpoint import Checkpoint
from tpot_locust.report.live_metrics import LiveFacts, render
from tpot_locust.report.progress import ProgressPrinter

if TYPE_CHECKING:
    from locust.env import Environment

    from tpot_locust.harness.load.traffic import TrafficDriver
    from tpot_locust.harness.run.roles import Role
    from tpot_locust.metrics.collector import Collector
    from tpot_locust.metrics.recorder import Recorder

logger = logging.getLogger(__name__)


class TickedRun(Protocol):
    """What a tick reads of the run (a ``RunState``)."""

    environment: Environment
    recorder: Recorder
    collector: Collector
    role: Role
    driver: TrafficDriver | None
    running: bool

    @property
    def interval_s(self) -> float: ...

    def run_info(self) -> RunFacts: ...


class RunTicks:
    """A run's ticks, and the live metrics page they keep (``--tpot-metrics-address``)."""

    def __init__(self, run: TickedRun) -> None:
        self.run = run
        self.live_metrics: MetricsEndpoint | None = None
        self.progress: ProgressPrinter | None = None  # a headless scenario run's line
        self.checkpoint: Checkpoint | None = None  # the totals on disk as they go (not a worker)
        self._greenlet: gevent.Greenlet | None = None
        self._stop = Event()

    def begin_test(self, folder: ResultsFolder | None, progress: ProgressPrinter | None) -> None:
        """A test's checkpoint (in its results folder, if any) and progress line, from its
        next tick on."""
        self.checkpoint = Checkpoint(folder) if folder is not None else None
        self.progress = progress

    def start(self) -> None:
        self.stop()
        self._stop = Event()
        self._greenlet = gevent.spawn(self._tick_forever, self._stop)

    def stop(self) -> None:
        """Stop between ticks, never inside one."""
        if self._greenlet is not None:
            self._stop.set()
            self._greenlet.join()
            self._greenlet = None

    def tick(self, final: bool = False) -> None:
        run = self.run
        # this process's own samples (a master's come from its workers' reports)
        run.role.add_own_interval(run.collector, run.recorder, final)
        in_flight = run.driver.in_flight if run.driver else 0
        run.collector.tick(self._users() + in_flight, final)
        if self.progress is not None and not final:
            self.progress.maybe_print(run.collector)
        if not final:  # the final one's totals go to histograms.json
            self.save_checkpoint()
        self.publish_live()

    def save_checkpoint(self) -> None:
        """The totals and facts as they stand, on disk (``report.checkpoint``)."""
        if self.checkpoint is not None and self.run.running:
            self.checkpoint.save(self.run.collector.totals, self.run.run_info)

    def serve_live_metrics(self, host: str, port: int) -> None:
        """``--tpot-metrics-address``: the merged totals for Prometheus, from now on (an
        ``OSError`` when the address cannot be bound)."""
        endpoint = MetricsEndpoint(host, port)
        endpoint.start()
        self.live_metrics = endpoint
        self.publish_live()

    def publish_live(self) -> None:
        """The live page of the totals as they stand (``report.live_metrics``)."""
        if self.live_metrics is None:
            return
        timeseries = self.run.collector.timeseries
        facts = LiveFacts(
            running=self.run.running,
            users=self._users(),
            tokens_per_s=timeseries[-1].get("tokens_per_s") if timeseries else None,
            workers_missing=self.run.role.workers_lost(self.run.running),
        )
        try:
            self.live_metrics.update(render(self.run.collector.totals, facts))
        except Exception:  # the page is a view: a failure must not stop the run's ticks
            logger.exception("tpot-locust: the live metrics page could not be made")

    def _users(self) -> int:
        runner = self.run.environment.runner
        return runner.user_count if runner is not None else 0

    def _tick_forever(self, stop: Event) -> None:
        while not stop.wait(timeout=self.run.interval_s):
            self.tick()
