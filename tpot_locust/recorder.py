"""Recorder: HDR histograms per metric x user class, following HdrHistogram's Recorder.

Finished requests add their samples to the *interval* set; ``take_interval`` swaps in a
fresh set and returns the finished one (a delta). A worker ships deltas to the master; the
master (or a local run) adds deltas into its totals. Samples are buffered as numpy arrays
and bucketed in bulk, so the per-token cost is an append, not a ``record_value`` call.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from hdrh.histogram import HdrHistogram

from tpot_locust.histograms import add_into, decode_histogram, new_histogram, record_many
from tpot_locust.timings import RequestTimings, to_us

METRICS: tuple[str, ...] = ("tpot", "request_tpot", "itl", "ttft", "e2e", "worst_gap")
FLUSH_PENDING_VALUES = 100_000


@dataclass
class ClassCounters:
    ok: int = 0
    failed: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    output_tokens: int = 0
    partial_tokens: int = 0  # tokens received by requests that then failed
    estimated_requests: int = 0  # output count not reported by the server
    prompt_tokens_requested: int = 0
    prompt_tokens_reported: int = 0
    clamped_values: int = 0
    first_send_wall_ns: int = 0
    last_token_wall_ns: int = 0

    def add(self, other: ClassCounters) -> None:
        for name in (
            "ok",
            "failed",
            "output_tokens",
            "partial_tokens",
            "estimated_requests",
            "prompt_tokens_requested",
            "prompt_tokens_reported",
            "clamped_values",
        ):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.errors.update(other.errors)
        if other.first_send_wall_ns:
            firsts = [t for t in (self.first_send_wall_ns, other.first_send_wall_ns) if t]
            self.first_send_wall_ns = min(firsts)
        self.last_token_wall_ns = max(self.last_token_wall_ns, other.last_token_wall_ns)

    def to_dict(self) -> dict[str, Any]:
        data = {k: v for k, v in self.__dict__.items() if k != "errors"}
        data["errors"] = dict(self.errors)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ClassCounters:
        counters = cls(**{k: v for k, v in data.items() if k != "errors"})
        counters.errors = Counter(data.get("errors", {}))
        return counters


@dataclass
class ClassMetrics:
    histograms: dict[str, HdrHistogram] = field(
        default_factory=lambda: {name: new_histogram() for name in METRICS}
    )
    counters: ClassCounters = field(default_factory=ClassCounters)

    def add(self, other: ClassMetrics) -> None:
        for name, histogram in other.histograms.items():
            add_into(self.histograms.setdefault(name, new_histogram()), histogram)
        self.counters.add(other.counters)


class MetricSet:
    """Histograms and counters per user class; an interval (delta) or a running total."""

    def __init__(self) -> None:
        self.classes: dict[str, ClassMetrics] = {}

    def for_class(self, user_class: str) -> ClassMetrics:
        metrics = self.classes.get(user_class)
        if metrics is None:
            metrics = self.classes[user_class] = ClassMetrics()
        return metrics

    def add(self, other: MetricSet) -> None:
        for user_class, metrics in other.classes.items():
            self.for_class(user_class).add(metrics)

    def combined(self) -> ClassMetrics:
        """All classes merged exactly (counts add; percentiles are recomputed)."""
        total = ClassMetrics()
        for metrics in self.classes.values():
            total.add(metrics)
        return total

    def encode(self) -> dict[str, Any]:
        """A msgpack/JSON-safe form: base64 HdrHistogram V2 blobs plus plain counters."""
        return {
            user_class: {
                "histograms": {
                    name: histogram.encode().decode("ascii")
                    for name, histogram in metrics.histograms.items()
                    if histogram.total_count
                },
                "counters": metrics.counters.to_dict(),
            }
            for user_class, metrics in self.classes.items()
        }

    @classmethod
    def decode(cls, data: dict[str, Any]) -> MetricSet:
        metric_set = cls()
        for user_class, encoded in data.items():
            metrics = metric_set.for_class(user_class)
            for name, blob in encoded.get("histograms", {}).items():
                metrics.histograms[name] = decode_histogram(blob)
            metrics.counters = ClassCounters.from_dict(encoded.get("counters", {}))
        return metric_set


class Recorder:
    """Listener of ``token_timings``: one per process."""

    def __init__(self) -> None:
        self._interval = MetricSet()
        self._pending: dict[tuple[str, str], list[np.ndarray]] = {}
        self._pending_values = 0
        self._wall_offset_ns = time.time_ns() - time.perf_counter_ns()

    def record(self, timings: RequestTimings, **_: Any) -> None:
        counters = self._interval.for_class(timings.user_class).counters
        tokens = timings.output_tokens
        if not timings.ok:
            counters.failed += 1
            counters.errors[timings.error_category or "unknown"] += 1
            counters.partial_tokens += sum(timings.token_counts)
            return
        counters.ok += 1
        counters.output_tokens += tokens
        counters.estimated_requests += timings.tokens_estimated
        counters.prompt_tokens_requested += timings.prompt_tokens_requested
        counters.prompt_tokens_reported += timings.prompt_tokens_reported or 0
        send_wall = timings.t_send_ns + self._wall_offset_ns
        if not counters.first_send_wall_ns or send_wall < counters.first_send_wall_ns:
            counters.first_send_wall_ns = send_wall
        last_wall = timings.token_stamps[-1] + self._wall_offset_ns
        counters.last_token_wall_ns = max(counters.last_token_wall_ns, last_wall)

        itl = timings.itl_ns()
        scalars: dict[str, float] = {"ttft": timings.ttft_ns, "e2e": timings.e2e_ns}
        if itl.size:
            scalars["worst_gap"] = int(itl.max())
        if (request_tpot := timings.request_tpot_ns) is not None:
            scalars["request_tpot"] = request_tpot
        self._add_pending(timings.user_class, "itl", to_us(itl))
        self._add_pending(timings.user_class, "tpot", to_us(timings.tpot_ns()))
        for name, value in scalars.items():
            self._add_pending(timings.user_class, name, to_us(np.array([value])))

    def _add_pending(self, user_class: str, metric: str, values_us: np.ndarray) -> None:
        if values_us.size == 0:
            return
        self._pending.setdefault((user_class, metric), []).append(values_us)
        self._pending_values += values_us.size
        if self._pending_values >= FLUSH_PENDING_VALUES:
            self.flush()

    def flush(self) -> None:
        """Bucket every buffered sample into the interval histograms."""
        pending, self._pending, self._pending_values = self._pending, {}, 0
        for (user_class, metric), arrays in pending.items():
            metrics = self._interval.for_class(user_class)
            clamped = record_many(metrics.histograms[metric], np.concatenate(arrays))
            metrics.counters.clamped_values += clamped

    def take_interval(self) -> MetricSet:
        """The delta since the previous call; recording continues into a fresh set."""
        self.flush()
        finished, self._interval = self._interval, MetricSet()
        return finished
