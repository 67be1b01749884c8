"""Deterministic virtual-time runs of the engine: no sockets, no sleeping, exact schedules.

``run_virtual`` feeds requests (arrival time, prompt and output lengths) to an ``EngineCore``
and jumps the clock from step end to step end (or to the next arrival when idle). It returns
the same truth lines the real-time server writes, with ``send_ns`` = the step end times and
``perf_offset_ns`` = 0, plus the step lines: a test can assert exact gaps, TTFTs and
preemptions in milliseconds of CPU time.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .engine import EngineCore, Seq
from .profiles import EngineParams, engine_params


@dataclass(frozen=True)
class VirtualRequest:
    request_id: str
    arrival_ms: float
    prompt_tokens: int
    output_tokens: int
    stream: bool = True


@dataclass
class VirtualRun:
    records: list[dict[str, Any]]  # one per request, in order of completion
    steps: list[dict[str, Any]]  # one per engine step
    preemptions: int
    by_id: dict[str, dict[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.by_id = {r["request_id"]: r for r in self.records}

    def gaps_ms(self, request_id: str) -> list[float]:
        send = self.by_id[request_id]["send_ns"]
        return [(b - a) / 1e6 for a, b in zip(send, send[1:], strict=False)]

    def ttft_ms(self, request_id: str) -> float:
        record = self.by_id[request_id]
        ttft_ns: int = record["send_ns"][0] - record["arrival_ns"]
        return ttft_ns / 1e6


def _request_record(seq: Seq, send: list[int], steps: list[int], stream: bool) -> dict[str, object]:
    tokens = [1] * len(send)
    if not stream:  # the whole body goes out with the last token
        send, steps, tokens = send[-1:], steps[-1:], [seq.total]
    return {
        "request_id": seq.request_id,
        "api": "chat",
        "prompt_tokens": seq.prompt,
        "completion_tokens": sum(tokens),
        "arrival_ns": seq.arrival_ns,
        "send_ns": send,
        "tokens": tokens,
        "perf_offset_ns": 0,
        "aborted": False,
        "stream": stream,
        "finish_reason": "length",
        **seq.truth_fields(0),
        "steps": steps,
    }


def run_virtual(
    params: EngineParams | str | Mapping[str, object],
    requests: Iterable[VirtualRequest],
    seed: int = 0,
    max_steps: int = 10_000_000,
) -> VirtualRun:
    """Run every request to completion in virtual time (t = 0 is the first instant)."""
    if not isinstance(params, EngineParams):
        params = engine_params(params)
    ordered = sorted(requests, key=lambda r: r.arrival_ms)  # stable: ties keep input order
    core = EngineCore(params, seed)
    frontend_ns = round(params.frontend_ms * 1e6)
    seqs: list[Seq] = []
    streams: dict[str, bool] = {}
    for request in ordered:
        if request.request_id in streams:
            raise ValueError(f"duplicate request id {request.request_id!r}")
        if request.prompt_tokens + request.output_tokens > params.max_model_len:
            raise ValueError(
                f"{request.request_id}: prompt + output ({request.prompt_tokens} + "
                f"{request.output_tokens}) exceeds max_model_len {params.max_model_len}"
            )
        arrival = round(request.arrival_ms * 1e6)
        seqs.append(
            Seq(
                request.request_id,
                arrival,
                request.prompt_tokens,
                request.output_tokens,
                ready_ns=arrival + frontend_ns,
            )
        )
        streams[request.request_id] = request.stream
    send: dict[str, list[int]] = {s.request_id: [] for s in seqs}
    step_ids: dict[str, list[int]] = {s.request_id: [] for s in seqs}
    records: list[dict[str, Any]] = []
    steps: list[dict[str, Any]] = []
    t, j = 0, 0
    while True:
        while j < len(seqs) and seqs[j].arrival_ns <= t:
            core.add(seqs[j])
            j += 1
        step = core.step(t)
        if step is None:
            later = [seqs[j].arrival_ns] if j < len(seqs) else []
            ready = core.next_ready_ns()
            if ready is not None and ready > t:
                later.append(ready)
            if not later:
                if core.waiting:
                    raise RuntimeError("engine cannot schedule its queue (KV cache too small?)")
                break
            t = min(later)
            continue
        if len(steps) >= max_steps:
            raise RuntimeError(f"more than {max_steps} steps")
        steps.append(step.record())
        for seq in step.emitted:
            send[seq.request_id].append(step.end_ns)
            step_ids[seq.request_id].append(step.index)
        for seq in step.finished:
            rid = seq.request_id
            records.append(_request_record(seq, send[rid], step_ids[rid], streams[rid]))
        t = step.end_ns
    return VirtualRun(records, steps, core.preemptions)
