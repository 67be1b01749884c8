"""Embedded simulated streaming server: every API of ``tpot_locust.apis``, each in its
own format (chat and completions in vLLM's).

It exists so the load tester can be tested end to end against a server whose token timing is
known exactly: every token event's send time is written to a ground-truth file.

Two timing modes: independent per-stream gaps (``--ttft-ms``/``--gap-ms``, the default,
``timing.GapModel``), or an engine (``--profile``) that batches every request in one
iteration-level scheduler (``engine``: continuous batching, chunked prefill, KV cache with
preemption, stalls; ``profiles``: the cost model; ``engine_loop``: real time;
``virtual``: deterministic virtual time for tests).
"""

from __future__ import annotations

__all__ = ["main", "start_simulator", "SimProcess"]


def __getattr__(name: str) -> object:
    # Lazy, so ``python -m tpot_locust.sim`` does not import the subprocess helpers.
    if name == "main":
        from .cli import main

        return main
    if name in ("start_simulator", "SimProcess"):
        from . import process

        return getattr(process, name)
    raise AttributeError(name)
