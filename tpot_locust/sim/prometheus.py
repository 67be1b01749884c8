"""The simulator's ``GET /metrics``: vLLM's Prometheus metrics from the simulator's own state.

A metrics sampler (issue 26) must be testable against a server whose every number is known, so
the simulator serves vLLM's names, types, HELP texts, labels and histogram buckets (vLLM V1
``vllm/v1/metrics/loggers.py``), in the Prometheus text format 0.0.4, without
``prometheus_client`` (the simulator imports only the common layer).

Cost: a token event adds one to an ITL bucket (a comparison for the usual gap under 10 ms, a
bisection of the 19 bounds above it). Everything else is per request (TTFT, prompt tokens, e2e,
and at its end its tokens and gaps), per engine step (tokens per step), or read when
``/metrics`` is asked for: the gauges, and the tokens and gaps of the requests still in flight.
The text is built only then.
"""

from __future__ import annotations

import math
import time
from bisect import bisect_left
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
FINISH_REASONS = ("stop", "length", "abort", "error", "repetition")  # vLLM's FinishReason

# vLLM's bucket bounds, in seconds (time histograms) or tokens.
# fmt: off
TTFT_BUCKETS_S = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5,
                  5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
ITL_BUCKETS_S = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0,
                 7.5, 10.0, 20.0, 40.0, 80.0)
REQUEST_LATENCY_BUCKETS_S = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0,
                             50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)
# fmt: on
ITL_BOUNDS_NS = tuple(round(b * 1e9) for b in ITL_BUCKETS_S)  # the hot path bisects these
ITL_FIRST_NS = ITL_BOUNDS_NS[0]
ITERATION_TOKEN_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)

Labels = tuple[tuple[str, str], ...]


def format_value(value: float) -> str:
    """A sample value as vLLM's exporter (prometheus_client) writes it: ``1.0``, ``+Inf``,
    ``NaN``, and Go's exponent form from 1e7 up (``1.7961662585e+09``)."""
    value = float(value)
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if math.isnan(value):
        return "NaN"
    text = repr(value)
    dot = text.find(".")
    if value > 0 and dot > 6:  # d.ddd...e+XX, trailing zeros dropped
        mantissa = (text[0] + "." + text[1:dot] + text[dot + 1 :]).rstrip("0").rstrip(".")
        return f"{mantissa}e+{dot - 1:02d}"
    return text


def escape_label(value: str) -> str:
    """Backslash, double quote and newline escaped, as the text format requires."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def label_text(labels: Labels) -> str:
    """``{k="v",...}`` sorted by name, as prometheus_client writes them (``le`` included)."""
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{escape_label(v)}"' for k, v in sorted(labels)) + "}"


class Family:
    """One family with one labelled child (the simulator is one engine, ``engine="0"``)."""

    kind = ""

    def __init__(self, name: str, help_text: str, labels: Labels) -> None:
        self.name = name
        self.help = help_text
        self.labels = labels

    def header(self, name: str, kind: str) -> list[str]:
        return [f"# HELP {name} {escape_help(self.help)}", f"# TYPE {name} {kind}"]

    def render(self, out: list[str], created: float) -> None:
        raise NotImplementedError


class Gauge(Family):
    """A value read when rendered (``read``), or set by its owner (``value``)."""

    kind = "gauge"

    def __init__(
        self, name: str, help_text: str, labels: Labels, read: Callable[[], float] | None = None
    ) -> None:
        super().__init__(name, help_text, labels)
        self.value = 0.0
        self.read = read

    def render(self, out: list[str], created: float) -> None:
        value = self.read() if self.read is not None else self.value
        out += self.header(self.name, "gauge")
        out.append(f"{self.name}{label_text(self.labels)} {format_value(value)}")


class Counter(Family):
    """``name`` without ``_total`` (as prometheus_client takes it); ``value`` is added to by
    the owner on its own path, or ``read`` when rendered. Rendered as ``name_total`` with a
    ``name_created`` gauge, as vLLM's prometheus_client serves it."""

    kind = "counter"

    def __init__(
        self,
        name: str,
        help_text: str,
        labels: Labels,
        read: Callable[[], float] | None = None,
        children: Sequence[Labels] = (),
    ) -> None:
        super().__init__(name, help_text, labels)
        self.value = 0.0
        self.read = read
        self.children: dict[Labels, float] = {c: 0.0 for c in children}  # extra label sets

    def render(self, out: list[str], created: float) -> None:
        total = self.name + "_total"
        out += self.header(total, "counter")
        if self.children:
            rows = [(self.labels + extra, value) for extra, value in self.children.items()]
        else:
            rows = [(self.labels, self.read() if self.read is not None else self.value)]
        for labels, value in rows:
            out.append(f"{total}{label_text(labels)} {format_value(value)}")
        name = self.name + "_created"
        out += self.header(name, "gauge")
        for labels, _ in rows:
            out.append(f"{name}{label_text(labels)} {format_value(created)}")


class Histogram(Family):
    """Bucket counts by bisection; ``scale`` divides observed values for rendering (the
    simulator observes integer nanoseconds: exact at every bucket bound, no float per token)."""

    kind = "histogram"

    def __init__(
        self, name: str, help_text: str, labels: Labels, bounds: Sequence[float], scale: int = 1
    ) -> None:
        super().__init__(name, help_text, labels)
        self.bounds = tuple(bounds)
        self.scaled = [round(b * scale) for b in bounds]  # bounds in observed units
        self.scale = scale
        self.counts = [0] * (len(bounds) + 1)  # last: above every bound (+Inf only)
        self.sum = 0
        self.count = 0

    def observe(self, value: int) -> None:
        """One observation, in observed units (ns for time histograms)."""
        self.counts[bisect_left(self.scaled, value)] += 1
        self.sum += value
        self.count += 1

    def render(self, out: list[str], created: float) -> None:
        name, labels = self.name, self.labels
        out += self.header(name, "histogram")
        cumulative = 0
        for bound, count in zip(self.bounds, self.counts, strict=False):
            cumulative += count
            le = label_text(labels + (("le", format_value(bound)),))
            out.append(f"{name}_bucket{le} {format_value(cumulative)}")
        le = label_text(labels + (("le", "+Inf"),))
        out.append(f"{name}_bucket{le} {format_value(cumulative + self.counts[-1])}")
        text = label_text(labels)
        out.append(f"{name}_count{text} {format_value(self.count)}")
        out.append(f"{name}_sum{text} {format_value(self.sum / self.scale)}")
        out += self.header(name + "_created", "gauge")
        out.append(f"{name}_created{text} {format_value(created)}")


class Registry:
    """Metrics in the order they are rendered."""

    def __init__(self) -> None:
        self.metrics: list[Family] = []
        self.created = time.time()

    def add(self, metric: Family) -> Family:
        self.metrics.append(metric)
        return metric

    def render(self) -> bytes:
        out: list[str] = []
        for metric in self.metrics:
            metric.render(out, self.created)
        return ("\n".join(out) + "\n").encode("utf-8")


NS = 1_000_000_000
SIM_INFO = "tpot_sim_info"  # the simulator's own sample: how a scraper tells it from a vLLM


class InFlight(Protocol):
    def sent(self) -> tuple[int, int]:
        """(token events sent so far, ns from the first to the last)."""
        ...


class SimMetrics:
    """vLLM's metrics of the one simulated engine.

    Fed from the responses' send stamps, so the server's view equals the truth file: a token
    event adds one to an ``itl.counts`` bucket (``StreamedResponse._send``, the hot path); a
    request's first send observes TTFT and counts its prompt (``first_token``), its end adds its
    tokens and gaps (``finished``). The engine observes ``iteration_tokens`` per step; gauges, the
    preemption counter and the requests in flight are read through ``bind`` when rendering.
    """

    def __init__(self, model: str = "tpot-sim", profile: str = "gap mode") -> None:
        labels: Labels = (("model_name", model), ("engine", "0"))
        self.registry = r = Registry()
        self.running = Gauge(
            "vllm:num_requests_running", "Number of requests in model execution batches.", labels
        )
        self.waiting = Gauge(
            "vllm:num_requests_waiting", "Number of requests waiting to be processed.", labels
        )
        self.kv_usage = Gauge(
            "vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", labels
        )
        self.preemptions = Counter(
            "vllm:num_preemptions", "Cumulative number of preemption from the engine.", labels
        )
        self.prompt = Counter("vllm:prompt_tokens", "Number of prefill tokens processed.", labels)
        self.generation = Counter(
            "vllm:generation_tokens", "Number of generation tokens processed.", labels
        )
        reasons = [(("finished_reason", reason),) for reason in FINISH_REASONS]
        self.success = Counter(
            "vllm:request_success",
            "Count of successfully processed requests.",
            labels,
            children=reasons,
        )
        self.iteration_tokens = Histogram(
            "vllm:iteration_tokens_total",
            "Histogram of number of tokens per engine_step.",
            labels,
            ITERATION_TOKEN_BUCKETS,
        )
        self.ttft = Histogram(
            "vllm:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            labels,
            TTFT_BUCKETS_S,
            NS,
        )
        self.itl = Histogram(
            "vllm:inter_token_latency_seconds",
            "Histogram of inter-token latency in seconds.",
            labels,
            ITL_BUCKETS_S,
            NS,
        )
        self.e2e = Histogram(
            "vllm:e2e_request_latency_seconds",
            "Histogram of e2e request latency in seconds.",
            labels,
            REQUEST_LATENCY_BUCKETS_S,
            NS,
        )
        phases = {  # engine mode: one observation per complete request (vLLM's phases)
            phase: Histogram(
                f"vllm:request_{phase}_time_seconds",
                f"Histogram of time spent in {state} phase for request.",
                labels,
                REQUEST_LATENCY_BUCKETS_S,
                NS,
            )
            for phase, state in (
                ("queue", "WAITING"),
                ("inference", "RUNNING"),
                ("prefill", "PREFILL"),
                ("decode", "DECODE"),
            )
        }
        self.phases = phases
        for metric in (
            self.running,
            self.waiting,
            self.kv_usage,
            self.preemptions,
            self.prompt,
            self.generation,
            self.success,
            self.iteration_tokens,
            self.ttft,
            self.itl,
            self.e2e,
            *phases.values(),
        ):
            r.add(metric)
        # prometheus_client's default collector in vLLM's API server: the engine's planted
        # full collections (generation 2); the younger generations are not simulated
        self.gc = Counter(
            "python_gc_collections",
            "Number of times this generation was collected",
            (),
            children=[(("generation", g),) for g in ("0", "1", "2")],
        )
        r.add(self.gc)
        self._gc_read: Callable[[], float] | None = None
        # what this server is, after vLLM's own: a reader is told it measured the simulator
        r.add(
            Gauge(
                SIM_INFO,
                "The tpot-locust embedded simulator (vLLM-shaped).",
                (("emulates", "vllm"), ("profile", profile)),
                read=lambda: 1.0,
            )
        )
        self._tokens_done = 0  # generation tokens of ended requests
        self._gaps_done = 0  # their token gaps
        self._gap_ns_done = 0  # and the sum of those gaps
        self._in_flight: Callable[[], Iterable[InFlight]] = tuple

    def bind(
        self,
        running: Callable[[], float],
        waiting: Callable[[], float] | None = None,
        kv_usage: Callable[[], float] | None = None,
        preemptions: Callable[[], float] | None = None,
        in_flight: Callable[[], Iterable[InFlight]] | None = None,
        gc_collections: Callable[[], float] | None = None,
        kv_offload: tuple[Callable[[], float], Callable[[], float]] | None = None,
    ) -> None:
        """Read these when rendering (None: stays 0, as in gap mode; no requests in flight).
        ``kv_offload`` (bytes loaded from CPU memory, stored to it): served as vLLM's
        OffloadingConnector does, only when offloading is on."""
        self.running.read = running
        self.waiting.read = waiting
        self.kv_usage.read = kv_usage
        self.preemptions.read = preemptions
        self._gc_read = gc_collections
        if kv_offload is not None:
            labels = self.running.labels
            for way, read, help_text in (
                ("load", kv_offload[0], "Total bytes loaded from offload storage to GPU."),
                ("store", kv_offload[1], "Total bytes stored from GPU to offload storage."),
            ):
                self.registry.add(
                    Counter(f"vllm:kv_offload_{way}_bytes", help_text, labels, read=read)
                )
        if in_flight is not None:
            self._in_flight = in_flight

    def first_token(self, ttft_ns: int, prompt_tokens: int) -> None:
        """A request's first send: its prompt counts as processed (vLLM: at the first token)."""
        self.ttft.observe(ttft_ns)
        self.prompt.value += prompt_tokens

    def finished(
        self, reason: str, e2e_ns: int | None, tokens: int, events: int, span_ns: int
    ) -> None:
        """A request ended (``reason`` "abort": the client went away); e2e for complete ones.
        ``events`` token events over ``span_ns`` (first to last send) carried ``tokens``."""
        key = (("finished_reason", reason),)
        children = self.success.children
        children[key] = children.get(key, 0.0) + 1
        if e2e_ns is not None:
            self.e2e.observe(e2e_ns)
        self._tokens_done += tokens
        if events > 1:
            self._gaps_done += events - 1
            self._gap_ns_done += span_ns

    def engine_request(self, queue_ns: int, prefill_ns: int, decode_ns: int) -> None:
        """A complete request's phases in the engine: arrival to its first scheduled step,
        from there to its first token, from there to its last (RUNNING: the last two)."""
        phases = self.phases
        phases["queue"].observe(queue_ns)
        phases["prefill"].observe(prefill_ns)
        phases["decode"].observe(decode_ns)
        phases["inference"].observe(prefill_ns + decode_ns)

    def render(self) -> bytes:
        """The exposition text; O(metrics + requests in flight), on the server's loop."""
        tokens, gaps, gap_ns = self._tokens_done, self._gaps_done, self._gap_ns_done
        for response in self._in_flight():
            events, span_ns = response.sent()
            tokens += events  # a response in flight is streaming: one token per event
            if events > 1:
                gaps += events - 1
                gap_ns += span_ns
        self.generation.value = tokens
        self.itl.count, self.itl.sum = gaps, gap_ns
        if self._gc_read is not None:
            self.gc.children[(("generation", "2"),)] = float(self._gc_read())
        return self.registry.render()
