"""Recorder: HDR histograms per metric x user class, following HdrHistogram's Recorder.

Aggregation yields to the gevent hub between batches (``let_streams_run``), so that
bucketing never holds up the stamping of token events for more than one batch.

Finished requests add their samples to the *interval* set (their gaps' causes, phases and
stalls a little later, through ``gap_tagging``); ``take_interval`` swaps in a
fresh set and returns the finished one (a delta). A worker ships deltas to the master; the
master (or a local run) adds deltas into its totals. Samples are buffered as numpy arrays
and bucketed in bulk, so the per-token cost is an append, not a ``record_value`` call.
"""

from __future__ import annotations

from array import array
from collections import Counter, deque
from dataclasses import dataclass, field, fields
from typing import Any, Protocol

import numpy as np
from hdrh.histogram import HdrHistogram

from tpot_locust.common import metric_catalogue as catalogue
from tpot_locust.common.clock import ARRIVAL_CLOCKS, WallClock
from tpot_locust.common.cooperation import WorkSlices, let_streams_run
from tpot_locust.common.errors import INTERRUPTED
from tpot_locust.common.metric_groups import group_parts, metric_group
from tpot_locust.common.timings import COUNT_SOURCES, RequestTimings, to_us, tpot_samples_ns
from tpot_locust.metrics.causes import (
    FAILED_END,
    PREFILL,
    CauseWindow,
)  # fmt: skip
from tpot_locust.metrics.fluidity import Pace, token_deadlines
from tpot_locust.metrics.gap_tagging import PREFILL_AT_GAP, GapTagger, HeldGaps, phase_metric
from tpot_locust.metrics.histograms import (
    HistogramDecodeError,
    add_into,
    decode_histogram,
    new_histogram,
    record_many,
    warm_up,
)
from tpot_locust.metrics.phases import PHASES, RunClock
from tpot_locust.metrics.stalls import ClientHealth
from tpot_locust.metrics.tail_gaps import WORST_GAPS_SHOWN, merge_tail
from tpot_locust.metrics.token_flow import TokenFlow

METRICS: tuple[str, ...] = catalogue.names()  # every metric, in the catalogue's order
PHASE_METRICS: tuple[str, ...] = catalogue.names("phased")
# Metrics whose samples are also kept per cause (``itl@prefill``, ..., ``itl@none``: the
# samples that overlapped no cause), for the report's "Why the tail".
CAUSE_METRICS: tuple[str, ...] = catalogue.names("causes")
# Metrics whose samples are tagged when they overlap a client stall (a copy of each tagged
# sample goes into ``metric@client_stall``; the report sets those aside).
STALL_METRICS: tuple[str, ...] = catalogue.names("stall_tagged")
FLUSH_PENDING_VALUES = 100_000
BUCKET_SLICE = 4096  # values bucketed between two yields
MAX_INTERRUPTED_IDS = 100


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
    # requests whose usage counted the prompt: what was asked for and what the server counted
    prompt_compared_requests: int = 0
    prompt_compared_requested: int = 0
    prompt_compared_reported: int = 0
    prompt_difference_max: int = 0  # the largest |counted - requested| of one request
    clamped_values: int = 0
    excluded_warmup: int = 0  # requests left out of the histograms by time
    excluded_cooldown: int = 0
    dropped_arrivals: int = 0  # open loop: arrivals not sent because max_in_flight was full
    interrupted: int = 0  # in flight when the run stopped: neither ok nor failed
    interrupted_ids: list[str] = field(default_factory=list)  # the first few, to cross-check
    retransmitting_requests: int = 0  # requests whose connection retransmitted (TCP_INFO)
    # requests by the clock their token events were stamped on (``ARRIVAL_CLOCKS``)
    stamped_segment: int = 0  # every read cut into its segments' own stamps
    stamped_kernel: int = 0
    stamped_user: int = 0
    shared_stamp_events: int = 0  # token events read together with the one before them
    multi_event_reads: int = 0  # reads that returned more than one token event
    good: int = 0  # successful requests that met every per-request SLO (goodput)
    # with a pace (slo.pace, ``metrics.fluidity``): tokens held to it, those late, and the
    # requests with any late token
    paced_tokens: int = 0
    late_tokens: int = 0
    late_requests: int = 0
    arrived_tokens: int = 0  # tokens of the token events that arrived, whatever the request's end
    # reasoning models: output tokens of reasoning events (or the server's count) and the rest
    reasoning_tokens: int = 0
    answer_tokens: int = 0
    reasoning_requests: int = 0  # requests with any reasoning token
    # the server's prefix cache: cached prompt tokens over the requests whose usage said so,
    # and those requests' prompt tokens (theirs where counted, else ours): the hit rate
    cached_prompt_tokens: int = 0
    cache_reported_requests: int = 0
    cache_reported_prompt_tokens: int = 0
    # requests by where their per-event token counts came from (``COUNT_SOURCES``)
    counted_by_usage: int = 0
    counted_by_token_ids: int = 0
    counted_by_logprobs: int = 0
    counted_by_token: int = 0
    counted_by_events: int = 0  # none said: one token per event, an estimate
    first_send_wall_ns: int = 0
    last_token_wall_ns: int = 0

    def add(self, other: ClassCounters) -> None:
        for name in _SUMMED_COUNTERS:
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for name in _MAX_COUNTERS:
            setattr(self, name, max(getattr(self, name), getattr(other, name)))
        room = MAX_INTERRUPTED_IDS - len(self.interrupted_ids)
        self.interrupted_ids.extend(other.interrupted_ids[: max(room, 0)])
        self.errors.update(other.errors)
        if other.first_send_wall_ns:
            firsts = [t for t in (self.first_send_wall_ns, other.first_send_wall_ns) if t]
            self.first_send_wall_ns = min(firsts)
        self.last_token_wall_ns = max(self.last_token_wall_ns, other.last_token_wall_ns)

    def arrival_clocks(self) -> dict[str, int]:
        """Requests per clock their tokens were stamped on, the clocks seen only."""
        counts = {clock: getattr(self, ARRIVAL_CLOCK_COUNTERS[clock]) for clock in ARRIVAL_CLOCKS}
        return {clock: count for clock, count in counts.items() if count}

    def count_sources(self) -> dict[str, int]:
        """Requests per source of their k_i (``COUNT_SOURCES``), the sources seen only."""
        counts = {source: getattr(self, COUNT_SOURCE_COUNTERS[source]) for source in COUNT_SOURCES}
        return {source: count for source, count in counts.items() if count}

    def to_dict(self) -> dict[str, Any]:
        data = {k: v for k, v in self.__dict__.items() if k != "errors"}
        data["errors"] = dict(self.errors)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ClassCounters:
        known = {f.name for f in fields(cls)} - {"errors"}
        counters = cls(**{k: v for k, v in data.items() if k in known})
        counters.errors = Counter(data.get("errors", {}))
        return counters


# Plain int counters (not a mapping): they add, merge and are shape-checked as the others.
COUNT_SOURCE_COUNTERS = {source: f"counted_by_{source}" for source in COUNT_SOURCES}
ARRIVAL_CLOCK_COUNTERS = {clock: f"stamped_{clock}" for clock in ARRIVAL_CLOCKS}
# Every int counter adds, but the wall-clock bounds (min and max instead) and ``_max``es.
_MAX_COUNTERS = tuple(f.name for f in fields(ClassCounters) if f.name.endswith("_max"))
_SUMMED_COUNTERS = tuple(
    f.name for f in fields(ClassCounters)
    if f.type == "int" and not f.name.endswith(("_wall_ns", "_max"))
)  # fmt: skip


@dataclass
class ClassMetrics:
    histograms: dict[str, HdrHistogram] = field(default_factory=dict)  # made on first use
    counters: ClassCounters = field(default_factory=ClassCounters)
    tail_gaps: list[dict[str, Any]] = field(default_factory=list)  # largest first (tail_gaps)

    @property
    def worst_gaps(self) -> list[dict[str, Any]]:
        return self.tail_gaps[:WORST_GAPS_SHOWN]

    def histogram(self, name: str) -> HdrHistogram:
        histogram = self.histograms.get(name)
        if histogram is None:
            histogram = self.histograms[name] = new_histogram()
        return histogram

    def add(self, other: ClassMetrics, cooperative: bool = False) -> None:
        """``cooperative``: yield before each histogram (~50 us each; a set has ~20), for
        a process whose users stream meanwhile; only where nothing else changes ``other``."""
        for name, histogram in other.histograms.items():
            if cooperative:
                let_streams_run()
            add_into(self.histogram(name), histogram)
        self.counters.add(other.counters)
        self.add_tail_gaps(other.tail_gaps)

    def add_tail_gaps(self, gaps: list[dict[str, Any]]) -> None:
        self.tail_gaps = merge_tail(self.tail_gaps, gaps)


def _decode_named(blob: str, key: str) -> HdrHistogram:
    """``decode_histogram``, its error naming the histogram (``classes.chat.histograms.tpot``)."""
    try:
        return decode_histogram(blob)
    except HistogramDecodeError as error:
        raise HistogramDecodeError(f"classes.{key}: {error}") from None


def _encode(histogram: HdrHistogram, cooperative: bool) -> str:
    if cooperative:
        let_streams_run()
    encoded: bytes = histogram.encode()  # hdrh is untyped
    return encoded.decode("ascii")


class MetricSet:
    """Histograms and counters per metric group (a user class, or a class and the model it
    sent to: ``common.metric_groups``); an interval (delta) or a running total."""

    def __init__(self) -> None:
        self.groups: dict[str, ClassMetrics] = {}
        self.client = ClientHealth()  # the recording processes' own loop lag and stalls

    def for_group(self, group: str) -> ClassMetrics:
        metrics = self.groups.get(group)
        if metrics is None:
            metrics = self.groups[group] = ClassMetrics()
        return metrics

    def add(self, other: MetricSet, cooperative: bool = False) -> None:
        for group, metrics in other.groups.items():
            self.for_group(group).add(metrics, cooperative)
        self.client.add(other.client)

    def combined(self, cooperative: bool = False) -> ClassMetrics:
        """All classes merged exactly (counts add; percentiles are recomputed)."""
        total = ClassMetrics()
        for metrics in self.groups.values():
            total.add(metrics, cooperative)
        return total

    @property
    def classes(self) -> dict[str, ClassMetrics]:
        """Per user class (``by_class``): to read, never to record into."""
        return self.by_class()

    def by_class(self) -> dict[str, ClassMetrics]:
        """Per user class, its models' groups merged exactly; a class that named no model
        is its own group (the same object, not a copy)."""
        return self._merged(0)

    def by_model(self) -> dict[str, ClassMetrics]:
        """Per model that a class named (``classes.<name>.model``), across classes; empty
        when none did."""
        return self._merged(1)

    def _merged(self, part: int) -> dict[str, ClassMetrics]:
        parts: dict[str, list[ClassMetrics]] = {}
        for group, metrics in self.groups.items():
            name = group_parts(group)[part]
            if name is not None:
                parts.setdefault(name, []).append(metrics)
        merged = {}
        for name, same in parts.items():
            if len(same) == 1:
                merged[name] = same[0]
                continue
            merged[name] = ClassMetrics()
            for metrics in same:
                merged[name].add(metrics)
        return merged

    def encode(self, cooperative: bool = False) -> dict[str, Any]:
        """A msgpack/JSON-safe form: base64 HdrHistogram V2 blobs plus plain counters.

        ``cooperative`` yields to the gevent hub before each blob (~0.5 ms each), for a
        worker's delta that must not stall token stamping; only for a set nothing else
        changes meanwhile (a delta already taken out of the recorder).
        """
        groups = {
            group: {
                "histograms": {
                    name: _encode(histogram, cooperative)
                    for name, histogram in metrics.histograms.items()
                    if histogram.total_count
                },
                "counters": metrics.counters.to_dict(),
                "tail_gaps": metrics.tail_gaps,
            }
            for group, metrics in self.groups.items()
        }
        return {"classes": groups, "client": self.client.encode()}

    @classmethod
    def decode(cls, data: dict[str, Any]) -> MetricSet:
        """Also reads the older form (classes only, no ``client``: results saved before)."""
        metric_set = cls()
        if "client" in data:
            metric_set.client = ClientHealth.decode(data["client"])
            data = data.get("classes", {})
        for group, encoded in data.items():
            metrics = metric_set.for_group(group)
            for name, blob in encoded.get("histograms", {}).items():
                metrics.histograms[name] = _decode_named(blob, f"{group}.histograms.{name}")
            metrics.counters = ClassCounters.from_dict(encoded.get("counters", {}))
            # ``worst_gaps``: results saved before the tail kept every gap's causes
            metrics.tail_gaps = list(encoded.get("tail_gaps", encoded.get("worst_gaps", [])))
        return metric_set


def _count_tokens(counters: ClassCounters, timings: RequestTimings) -> None:
    """A successful request's token counts: output (answer and reasoning), prompt (ours
    against the server's), the prefix cache's hits and where the per-event counts came from."""
    counters.output_tokens += timings.output_tokens
    counters.estimated_requests += timings.tokens_estimated
    counters.reasoning_tokens += timings.reasoning_tokens
    counters.answer_tokens += max(timings.output_tokens - timings.reasoning_tokens, 0)
    counters.reasoning_requests += timings.reasoning_tokens > 0
    source = COUNT_SOURCE_COUNTERS[timings.count_source]  # checked by refuse_out_of_range
    setattr(counters, source, getattr(counters, source) + 1)
    requested, reported = timings.prompt_tokens_requested, timings.prompt_tokens_reported
    counters.prompt_tokens_requested += requested
    counters.prompt_tokens_reported += reported or 0
    if reported is not None and requested:
        counters.prompt_compared_requests += 1
        counters.prompt_compared_requested += requested
        counters.prompt_compared_reported += reported
        counters.prompt_difference_max = max(counters.prompt_difference_max,
                                             abs(reported - requested))  # fmt: skip
    if timings.cached_prompt_tokens is not None:
        counters.cache_reported_requests += 1
        counters.cached_prompt_tokens += timings.cached_prompt_tokens
        counters.cache_reported_prompt_tokens += requested if reported is None else reported


class LagSource(Protocol):
    """What the recorder needs of the loop probe: the lags since the last call."""

    def take_lags(self) -> array[int]: ...


class GoodputRule(Protocol):
    """What the recorder needs of the scenario's per-request SLOs (``scenario.slo``)."""

    def met_by(self, request_ns: dict[str, float]) -> bool: ...


class Recorder:
    """Listener of ``token_timings``: one per process."""

    def __init__(self) -> None:
        self._interval = MetricSet()
        self._pending: dict[tuple[str, str], list[np.ndarray]] = {}
        self._pending_scalars: dict[tuple[str, str], list[float]] = {}  # one per request
        self._pending_values = 0
        self._finished: deque[RequestTimings] = deque()
        # one offset for the whole run, as every process's windows (common.clock)
        self._wall_offset_ns = WallClock().offset_ns
        self.tagger = GapTagger()
        self.token_flow = TokenFlow()  # live streams' tokens, for tokens/s per interval
        self.causes = self.tagger.causes  # every process's cause windows (``metrics.causes``)
        self.stalls = self.tagger.stalls  # this process's loop stalls (``metrics.stalls``)
        # this process's requests in flight (sent, not yet recorded): their send, wall ns
        self._sending: dict[str, int] = {}
        # the harness's loop probe (``harness.loop_probe``): its lags join each interval
        self.probe: LagSource | None = None
        self.clock: RunClock | None = None
        self.goodput: GoodputRule | None = None  # the scenario's per-request SLOs, if any
        self.pace: Pace | None = None  # the scenario's reading pace (slo.pace), if any
        warm_up()

    def on_stall(self, start_perf_ns: int, end_perf_ns: int) -> None:
        """A stall window of this process's loop (``perf_counter_ns``), from its probe."""
        start, end = self.to_wall_ns(start_perf_ns), self.to_wall_ns(end_perf_ns)
        self.stalls.add(start, end)
        self._interval.client.note_stall(start, end)

    def on_prefill(
        self, request_id: str, start_perf_ns: int, end_perf_ns: int | None, prompt_tokens: int,
        burst: bool = False, **_: Any,
    ) -> None:  # fmt: skip
        """Listener of ``prefill_window``: a request of this process sent (``end`` None),
        given its first token (``end``: its stamp) or failed before one (``end`` -1)."""
        start = self.to_wall_ns(start_perf_ns)
        if end_perf_ns is None:
            self._sending[request_id] = start
            window = CauseWindow(PREFILL, request_id, start, None, float(prompt_tokens), burst)
            self.causes.add(window)
            return
        if end_perf_ns == FAILED_END:
            self.causes.fail(PREFILL, request_id, burst)
            return
        end = self.to_wall_ns(end_perf_ns)
        self.causes.add(CauseWindow(PREFILL, request_id, start, end, float(prompt_tokens), burst))

    def to_wall_ns(self, perf_ns: int) -> int:
        return perf_ns + self._wall_offset_ns

    def count_dropped(self, user_class: str) -> None:
        self._interval.for_group(user_class).counters.dropped_arrivals += 1

    def record(self, timings: RequestTimings, **_: Any) -> None:
        timings.refuse_out_of_range()  # a locustfile's own timings too: nothing past int64
        self._sending.pop(timings.request_id, None)
        group = metric_group(timings.user_class, timings.model)
        counters = self._interval.for_group(group).counters
        if timings.error_category == INTERRUPTED:
            counters.interrupted += 1
            if len(counters.interrupted_ids) < MAX_INTERRUPTED_IDS:
                counters.interrupted_ids.append(timings.request_id)
            return
        if not timings.ok:
            counters.failed += 1
            counters.errors[timings.error_category or "unknown"] += 1
            counters.partial_tokens += sum(timings.token_counts)
            return
        send_wall = self.to_wall_ns(timings.t_send_ns)
        last_wall = self.to_wall_ns(timings.token_stamps[-1])
        excluded = self.clock.excluded(send_wall, last_wall) if self.clock else None
        if excluded == "warmup":
            counters.excluded_warmup += 1
            return
        if excluded == "cooldown":
            counters.excluded_cooldown += 1
            return
        counters.ok += 1
        counters.retransmitting_requests += timings.retransmits > 0
        if timings.arrival_clock in ARRIVAL_CLOCKS:
            clock_counter = ARRIVAL_CLOCK_COUNTERS[timings.arrival_clock]
            setattr(counters, clock_counter, getattr(counters, clock_counter) + 1)
        _count_tokens(counters, timings)
        if not counters.first_send_wall_ns or send_wall < counters.first_send_wall_ns:
            counters.first_send_wall_ns = send_wall
        counters.last_token_wall_ns = max(counters.last_token_wall_ns, last_wall)
        # The samples are computed later, in flush(), a request at a time with a yield in
        # between: done here, at the end of each request, they blocked the event loop for
        # ~0.3 ms per request and stretched other streams' gaps (benchmarks/README.md).
        self._finished.append(timings)

    def _samples(self, timings: RequestTimings) -> None:
        """Every histogram sample of one successful request, buffered for bucketing.

        The stamps become one array once, and scalars are buffered as Python numbers: at
        tens of thousands of events/s, per-request numpy calls were most of this work."""
        group = metric_group(timings.user_class, timings.model)  # its figures' key
        stamps = np.array(timings.token_stamps, dtype=np.int64)  # a copy: never pins the array
        itl = stamps[1:] - stamps[:-1]
        per_event = timings.tokens_after_first()
        ttft, ttft_from_intended = timings.ttft_ns, timings.ttft_from_intended_ns
        assert ttft is not None and ttft_from_intended is not None  # ok: a first token (record)
        scalars: dict[str, float] = {"ttft": ttft, "e2e": timings.e2e_ns}
        if (ttfat := timings.ttfat_ns) is not None:
            scalars["ttfat"] = ttfat
        if itl.size:
            scalars["worst_gap"] = int(itl.max())
        if (request_tpot := timings.request_tpot_ns) is not None:
            scalars["request_tpot"] = request_tpot
        if timings.scheduled:
            scalars["ttft_from_intended"] = ttft_from_intended
            scalars["schedule_lag"] = timings.t_send_ns - timings.t_intended_ns
        itl_us, tpot_us = to_us(itl), to_us(tpot_samples_ns(itl, per_event))
        self._add_pending(group, "itl", itl_us)
        self._add_pending(group, "tpot", tpot_us)
        if timings.read_delays_ns:
            self._add_pending(group, "read_delay", to_us(timings.read_delays_ns))
        if self.pace is not None:
            tokens, late, stall_ns = token_deadlines(self.pace, timings.t_send_ns, stamps,
                                                     timings.tokens_per_event())  # fmt: skip
            counters = self._interval.for_group(group).counters
            counters.paced_tokens += tokens
            counters.late_tokens += late
            counters.late_requests += late > 0
            scalars["stall_time"] = stall_ns
        for name, value in scalars.items():
            self._pending_scalars.setdefault((group, name), []).append(value)
        if self.goodput is not None and self.goodput.met_by(scalars):
            self._interval.for_group(group).counters.good += 1
        read_together = None
        if itl.size and not timings.stamps_recovered:
            shared = itl == 0  # events a read returned together carry one stamp
            if shared.any():
                counters = self._interval.for_group(group).counters
                counters.shared_stamp_events += int(np.count_nonzero(shared))
                counters.multi_event_reads += int(shared[0]) + int(
                    np.count_nonzero(shared[1:] & ~shared[:-1])
                )
                read_together = shared.copy()
                read_together[:-1] |= shared[1:]
        walls = stamps + self._wall_offset_ns
        self.tagger.hold(
            HeldGaps(
                user_class=group,  # the figures' key
                request_id=timings.request_id,
                release_wall_ns=HeldGaps.release_at(),
                send_wall_ns=self.to_wall_ns(timings.t_send_ns),
                scalars=scalars,
                starts_wall=walls[:-1],
                ends_wall=walls[1:],
                itl_ns=itl,
                counts=per_event,
                itl_us=itl_us,
                tpot_us=tpot_us,
                read_together=read_together,
                network=timings.retransmits > 0,
                recovered=timings.stamps_recovered,
            )
        )

    def _in_flight_sends(self) -> list[int]:
        """The wall send times of this process's requests not yet held for tagging."""
        sends = list(self._sending.values())
        if self._finished:
            sends.append(self.to_wall_ns(min(t.t_send_ns for t in self._finished)))
        return sends

    # --- the sink of tagged samples (``gap_tagging.SampleSink``)
    def add_samples(self, group: str, metric: str, values_us: np.ndarray) -> None:
        self._add_pending(group, metric, values_us)

    def add_scalar(self, group: str, metric: str, value_ns: float) -> None:
        self._pending_scalars.setdefault((group, metric), []).append(value_ns)

    def add_tail_gaps(self, group: str, gaps: list[dict[str, Any]]) -> None:
        self._interval.for_group(group).add_tail_gaps(gaps)

    def _add_pending(self, group: str, metric: str, values_us: np.ndarray) -> None:
        if values_us.size == 0:
            return
        self._pending.setdefault((group, metric), []).append(values_us)
        self._pending_values += values_us.size
        if self._pending_values >= FLUSH_PENDING_VALUES:
            self._bucket()

    def flush(self) -> None:
        """Compute the samples of finished requests, then bucket them into the interval."""
        self._compute_finished()
        self._bucket()

    def _compute_finished(self) -> None:
        slices = WorkSlices()  # streams get stamped in between
        while self._finished:
            self._samples(self._finished.popleft())
            slices.after_item()

    def _bucket(self) -> None:
        pending, self._pending, self._pending_values = self._pending, {}, 0
        scalars, self._pending_scalars = self._pending_scalars, {}
        for key, values_ns in scalars.items():
            pending.setdefault(key, []).append(to_us(np.asarray(values_ns, dtype=np.float64)))
        for (group, metric), arrays in pending.items():
            metrics = self._interval.for_group(group)
            values = np.concatenate(arrays)
            for start in range(0, values.size, BUCKET_SLICE):
                let_streams_run()  # let waiting streams be read between slices (~0.3 ms each)
                clamped = record_many(
                    metrics.histogram(metric), values[start : start + BUCKET_SLICE]
                )
                metrics.counters.clamped_values += clamped

    def take_interval(self, final: bool = False) -> MetricSet:
        """The delta since the previous call; ``final`` also tags every held gap."""
        self._compute_finished()
        self.tagger.tag(self, final, self._in_flight_sends())
        self._bucket()
        if self.probe is not None:
            self._interval.client.record_lags(self.probe.take_lags())
        for group, tokens in self.token_flow.take().items():
            self._interval.for_group(group).counters.arrived_tokens += tokens
        finished, self._interval = self._interval, MetricSet()
        return finished

    def reset(self) -> None:
        self.token_flow.clear()
        self.tagger.clear()
        self._finished.clear()
        self.take_interval()


__all__ = [
    "METRICS", "PHASES", "PHASE_METRICS", "STALL_METRICS", "MetricSet", "PREFILL_AT_GAP",
    "Recorder", "phase_metric",
]  # fmt: skip
