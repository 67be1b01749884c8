"""The GPUs' own state while a test runs: one sampler a DCGM exporter (``server.gpu_metrics``).

Each endpoint is sampled exactly as the server's ``/metrics`` is (``harness.watch.server_sampler``:
a child process, its lines in the results folder), at the same interval; its samples give
``gpu_throttle`` cause windows and the GPU's state over the run (``run["gpu_metrics"]``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from tpot_locust.common.results_folder import ResultsFolder
from tpot_locust.common.run_facts import ServerMetrics
from tpot_locust.harness.watch.server_sampler import ServerSampler
from tpot_locust.metrics.causes import CauseWindow

logger = logging.getLogger(__name__)


class GpuSamplers:
    """The DCGM exporters' samplers of one test, by label."""

    def __init__(self) -> None:
        self.samplers: dict[str, ServerSampler] = {}

    def start(
        self,
        endpoints: dict[str, str],
        interval_s: float,
        folder: ResultsFolder | None,
        on_windows: Callable[[list[CauseWindow]], None],
    ) -> None:
        self.stop()
        for label, url in endpoints.items():
            out = folder.gpu_metrics(label) if folder is not None else None
            sampler = ServerSampler(url, interval_s, out, on_windows)
            try:
                sampler.start()
            except OSError as error:
                logger.warning(
                    "tpot-locust: gpu metrics %s: the sampler did not start: %s", label, error
                )
                continue
            self.samplers[label] = sampler

    def stop(self) -> dict[str, ServerMetrics] | None:
        """Stop every sampler (bounded); their summaries by label, None when there were none."""
        samplers, self.samplers = self.samplers, {}
        for sampler in samplers.values():
            sampler.stop()
        return {label: sampler.summary() for label, sampler in samplers.items()} or None
