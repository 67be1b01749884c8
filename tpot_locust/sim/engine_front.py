"""Engine mode's side of the server (``--profile``): the engine loop, its gauges on
/metrics, each request's sequence and stream, and the GPU's /dcgm/metrics page.

Gap mode has none of it; the server holds one of these only when an engine is configured.
"""

from __future__ import annotations

import asyncio

from .dcgm import render_dcgm
from .engine import Seq
from .engine_loop import EngineLoop
from .engine_stream import EngineStream
from .http import HttpConnection
from .profiles import EngineParams
from .prometheus import SimMetrics
from .request import SimRequest
from .response import ResponseSetup, StreamedResponse
from .truth import TruthWriter


class EngineFront:
    """Feeds the engine the server's requests and keeps the server's in-flight set
    (``in_flight``, shared with it) as its streams start and end."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        params: EngineParams,
        *,
        model: str,
        seed: int,
        offset_ns: int,
        steps_out: TruthWriter,
        max_lead_ns: int,
        metrics: SimMetrics,
        in_flight: set[StreamedResponse],
    ) -> None:
        self.loop = EngineLoop(
            loop,
            params,
            seed=seed,
            offset_ns=offset_ns,
            steps_out=steps_out,
            max_lead_ns=max_lead_ns,
            metrics=metrics,
        )
        self._model = model  # a request for another model runs on that LoRA adapter
        self._metrics = metrics
        self._in_flight = in_flight
        core = self.core = self.loop.core
        metrics.bind(
            running=lambda: len(core.running),
            waiting=lambda: len(core.waiting),
            kv_usage=lambda: (core.total_blocks - core.free_blocks) / max(1, core.total_blocks),
            preemptions=lambda: core.preemptions,
            in_flight=lambda: in_flight,
            gc_collections=lambda: core.gc_collections,
            kv_offload=(lambda: core.kv_loaded_bytes, lambda: core.kv_stored_bytes)
            if core.params.kv_offload_tokens
            else None,
        )

    def submit(self, conn: HttpConnection, request: SimRequest, setup: ResponseSetup) -> None:
        """Queue an admitted request; its stream sends the head now, a token per step later.
        ``setup.on_end`` must be ``ended``."""
        arrival = request.arrival_perf_ns
        frontend_ns = round(self.core.params.frontend_ms * 1e6)
        seq = Seq(
            request.request_id,
            arrival,
            max(1, request.prompt_tokens),
            request.completion_tokens,
            ready_ns=arrival + frontend_ns,
            adapter=None if request.model == self._model else request.model,
            cached=request.cached_tokens or 0,
        )
        stream = EngineStream(conn, request, setup, seq)
        self._in_flight.add(stream)
        stream.start()
        self.loop.submit(seq)

    def ended(self, stream: EngineStream, aborted: bool) -> None:
        """A stream's end: an aborted one leaves the engine, a complete one is timed."""
        self._in_flight.discard(stream)
        if aborted:
            self.loop.abort(stream.seq)
            return
        seq, last = stream.seq, stream.last_send_perf_ns
        if seq.scheduled_ns is not None and seq.prefill_end_ns is not None and last is not None:
            self._metrics.engine_request(
                seq.scheduled_ns - seq.arrival_ns,  # the truth's queue_ns
                seq.prefill_end_ns - seq.scheduled_ns,
                last - seq.prefill_end_ns,
            )

    def dcgm_page(self) -> bytes:
        """The engine's GPU as a DCGM exporter shows it (``sim.dcgm``)."""
        core = self.core
        return render_dcgm(core.throttled, core.params.throttle_factor, core.params.name)

    def close(self) -> None:
        self.loop.close()
