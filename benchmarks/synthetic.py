"""Synthetic recordings for the memory and merge benchmarks: real deltas without a server."""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tpot_locust.common.clock import stamp_ns
from tpot_locust.common.timings import RequestTimings
from tpot_locust.metrics.recorder import Recorder
from tpot_locust.metrics.wire_delta import encode_delta


def synthetic_timings(
    rng: np.random.Generator, index: int, tokens: int, user_class: str
) -> RequestTimings:
    """A finished request: ``tokens`` one-token events, log-normal gaps around 5 ms; every
    second one open-loop (``scheduled``), so every metric gets samples."""
    gaps = rng.lognormal(np.log(5e6), 0.4, tokens - 1).astype(np.int64)
    t_send = stamp_ns() - int(gaps.sum()) - 30_000_000
    stamps = (t_send + 25_000_000 + np.concatenate(([0], np.cumsum(gaps)))).tolist()
    return RequestTimings(
        user_class=user_class,
        api="chat",
        request_id=f"r{index}",
        t_intended_ns=t_send,
        t_send_ns=t_send,
        token_stamps=stamps,
        token_counts=[1] * tokens,
        output_tokens=tokens,
        prompt_tokens_requested=256,
        prompt_tokens_reported=256,
        finish_reason="length",
        t_end_ns=stamps[-1],
        scheduled=index % 2 == 0,
    )


def encoded_deltas(
    count: int,
    tokens: int,
    requests: int,
    classes: Sequence[str] = ("chat", "arrivals"),
    after: int = 0,
) -> list[dict[str, Any]]:
    """``count`` real encoded deltas (what a worker ships: ``wire_delta.encode_delta``),
    each of ``requests`` requests; ``after``: those of a worker ``after`` intervals into its
    run (its first reports ship its whole kept tail of gaps, later ones only the gaps new
    to it)."""
    rng = np.random.default_rng(2)
    recorder = Recorder()
    deltas = []
    for number in range(after + count):
        for index in range(requests):
            user_class = classes[index % len(classes)]
            timings = synthetic_timings(rng, number * requests + index, tokens, user_class)
            recorder.record(timings)
        deltas.append(encode_delta(recorder.take_interval(final=True)))
    return deltas[after:]


# Memory handling variants (memory.py, merge.py), each applied once in a fresh process:
# "as is" is what a run does (since 2026-11-30 the histogram <-> encoder reference cycle is
# broken in tpot_locust.metrics.histograms, so a dropped histogram is freed at once); "mmap limit"
# adds glibc's mmap threshold at 128 KiB (the earlier workaround, since removed: it made
# decoding ~3x slower and the cycle fix alone keeps RSS flat).
VARIANTS = ("as is", "mmap limit")


def limit_heap_fragmentation() -> None:
    ctypes.CDLL("libc.so.6").mallopt(-3, 128 * 1024)  # M_MMAP_THRESHOLD


def apply_variant(variant: str) -> None:
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}")
    if variant == "mmap limit":
        limit_heap_fragmentation()


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")
