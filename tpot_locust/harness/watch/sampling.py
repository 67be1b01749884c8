"""The server's own metrics while a test runs (``server.metrics``, ``server.gpu_metrics``):
sampled on the master or the single process, each page in a child process
(``harness.watch.server_sampler``, ``harness.watch.gpu_samplers``); the cause windows they
find go to the run's recorder."""

from __future__ import annotations

import logging
from collections.abc import Callable

from tpot_locust.common.results_folder import ResultsFolder
from tpot_locust.common.run_facts import ServerMetrics
from tpot_locust.harness.watch.gpu_samplers import GpuSamplers
from tpot_locust.harness.watch.server_sampler import ServerSampler
from tpot_locust.metrics.causes import CauseWindow
from tpot_locust.scenario.model import Server

logger = logging.getLogger(__name__)


class ServerSampling:
    """One test's samplers of the server: its /metrics page and its GPUs' DCGM pages."""

    def __init__(self, on_windows: Callable[[list[CauseWindow]], None]) -> None:
        self.sampler: ServerSampler | None = None  # the server's /metrics, while a test runs
        self.gpu_samplers = GpuSamplers()  # the DCGM exporters' (``server.gpu_metrics``)
        self._on_windows = on_windows

    def start(self, server: Server | None, host: str | None, folder: ResultsFolder | None) -> None:
        """Sample the server's own metrics while the test runs (``server``: the scenario's
        block, None: a plain locustfile's defaults; ``host``: Locust's)."""
        self.stop_server()
        server = server if server is not None else Server()
        gpu_urls = server.gpu_metrics_urls(host)
        self.gpu_samplers.start(gpu_urls, server.metrics_interval, folder, self._on_windows)
        url = server.metrics_url(host)
        if url is None:
            return
        out = folder.server_metrics if folder is not None else None
        self.sampler = ServerSampler(url, server.metrics_interval, out, self._on_windows)
        try:
            self.sampler.start()
        except OSError as error:
            logger.warning("tpot-locust: server metrics: the sampler did not start: %s", error)
            self.sampler = None

    def stop_server(self) -> ServerMetrics | None:
        """Stop the /metrics sampler (bounded); its summary for the run's facts."""
        sampler, self.sampler = self.sampler, None
        if sampler is None:
            return None
        sampler.stop()
        return sampler.summary()
