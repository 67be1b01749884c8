"""Real-time driver of the engine: one timer, one step in flight, emission at each step's end.

Step k+1 starts at step k's *scheduled* end, so wake-up lateness and the time spent writing
step k's tokens (which a real engine overlaps with the next step) do not accumulate. If the
process wakes more than ``MAX_LAG_NS`` late (it was descheduled, or is overloaded), the next
step starts at the wake-up instead: clients then see one long gap, as from a real engine that
stalled, rather than a burst of catch-up steps. Each step line records its scheduled end
(``end_ns``), when its first and last writes happened (``sent_ns``, ``done_ns``) and any
re-anchoring (``lag_ns``).
"""

from __future__ import annotations

import asyncio
import time

from .engine import EngineCore, Seq, Step
from .precise_timer import PreciseTimer
from .profiles import EngineParams
from .prometheus import SimMetrics
from .truth import TruthWriter

MAX_LAG_NS = 2_000_000


class EngineLoop:
    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        params: EngineParams,
        *,
        seed: int,
        offset_ns: int,
        steps_out: TruthWriter | None,
        max_lead_ns: int = 1_000_000,
        metrics: SimMetrics | None = None,
    ) -> None:
        self.core = EngineCore(params, seed)
        self._iteration_tokens = metrics.iteration_tokens if metrics is not None else None
        self._loop = loop
        self._offset_ns = offset_ns
        self._steps_out = steps_out if steps_out is not None and steps_out.enabled else None
        self._timer = PreciseTimer(loop, self._tick, max_lead_ns)
        self._armed_ns: int | None = None
        self._inflight: Step | None = None
        self.reanchored = 0
        self._closed = False
        if self._steps_out is not None:  # the configuration, first, for whoever reads the log
            header = {"type": "engine", "profile": params.as_dict(), "seed": seed}
            self._steps_out.record({**header, "perf_offset_ns": offset_ns})

    def submit(self, seq: Seq) -> None:
        """Queue a request; wake the engine if it is idle."""
        self.core.add(seq)
        if self._inflight is None and (self._armed_ns is None or seq.ready_ns < self._armed_ns):
            self._arm(seq.ready_ns)

    def abort(self, seq: Seq) -> None:
        self.core.abort(seq)

    def close(self) -> None:
        self._closed = True
        self._timer.close()
        self._armed_ns, self._inflight = None, None

    def _arm(self, due_ns: int) -> None:
        self._timer.arm(due_ns)
        self._armed_ns = due_ns

    def _tick(self) -> None:
        start = self._armed_ns
        self._armed_ns = None
        if self._closed or start is None:
            return
        now = time.perf_counter_ns()
        step, self._inflight = self._inflight, None
        if step is not None:
            start = step.end_ns  # the engine goes on at once: emitting overlaps the next step
        lag = 0
        if now - start > MAX_LAG_NS:  # woke too late: the next step starts now
            lag, start = now - start, now
            self.reanchored += 1
        if step is not None:
            self._emit(step)
        self._start(start, lag)

    def _start(self, start: int, lag: int) -> None:
        step = self.core.step(start)
        if step is not None:
            self._inflight = step
            step.lag_ns = lag
            self._arm(step.end_ns)
            return
        ready = self.core.next_ready_ns()
        if ready is not None and ready > start:  # the head of the queue is still in the front end
            self._arm(ready)

    def _emit(self, step: Step) -> None:
        index, due = step.index, step.end_ns
        sent = time.perf_counter_ns()
        if self._iteration_tokens is not None:  # vLLM: prompts that got their first token + new
            self._iteration_tokens.observe(step.first_prompt_tokens + len(step.emitted))
        for seq in step.emitted:
            sink = seq.sink
            if sink is not None and sink.active:
                sink.emit(index, due)
        if self._steps_out is not None:
            done = time.perf_counter_ns()
            record: dict[str, object] = step.record(self._offset_ns)
            record["sent_ns"] = sent + self._offset_ns
            record["done_ns"] = done + self._offset_ns
            self._steps_out.record(record)
