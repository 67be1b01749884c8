"""The figures a recorder keeps: per metric group (a user class, or a class and its
model), HDR histograms and counters, merged exactly (counts add, percentiles are
recomputed), and their wire form between workers and master (``encode``/``decode``).

Apart from ``recorder`` (which fills them) because the master, the reports and saved
results read them without ever recording a request.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from hdrh.histogram import HdrHistogram

from tpot_locust.common.clock import ARRIVAL_CLOCKS
from tpot_locust.common.cooperation import let_streams_run
from tpot_locust.common.errors import (
    CONNECTION_RESET,
    INTERRUPTED,
    TIMEOUT_IDLE,
    TIMEOUT_TOTAL,
    TRUNCATED,
)
from tpot_locust.common.metric_groups import group_parts
from tpot_locust.common.timings import COUNT_SOURCES, RequestTimings
from tpot_locust.metrics.histogram_names import check_declared
from tpot_locust.metrics.histograms import (
    HistogramDecodeError,
    add_into,
    decode_histogram,
    new_histogram,
)
from tpot_locust.metrics.stalls import ClientHealth
from tpot_locust.metrics.tail_gaps import WORST_GAPS_SHOWN, merge_tail

MAX_INTERRUPTED_IDS = 100  # interrupted requests' ids kept, to cross-check with a server
# A burst request sent this long after its time counts late (5,000 in one burst took longer
# to prepare than the run lasted, and the run had said nothing)
BURST_LATE_S = 0.5


@dataclass(slots=True)
class ClassCounters:
    """Every counter of a metric group, a total that adds across intervals and processes
    (``_MERGE_RULES``): its fields are the counters' declaration (the catalogue's records
    are the histograms), and, slotted, a name it does not declare is an AttributeError
    where it is first set or read."""

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
    # scheduled bursts: requests whose time came, those sent, and those sent late
    # (``BURST_LATE_S`` after their time: their preparation outlasted it)
    burst_requests_due: int = 0
    burst_requests_sent: int = 0
    burst_requests_late: int = 0
    interrupted: int = 0  # in flight when the run stopped: neither ok nor failed
    interrupted_ids: list[str] = field(default_factory=list)  # the first few, to cross-check
    # The window in token time (docs/metrics.md, "The window"): its gaps measured and the
    # tokens of its events, whatever their request's fate; gaps after its end (a drain)
    window_gaps: int = 0
    window_tokens: int = 0
    window_reasoning_tokens: int = 0  # of them: events before their stream's first answer
    gaps_after_window: int = 0
    # streams cut after their first token event, by where (``CUT_WHERE``), and the longest
    # of them from its send (its E2E was at least that)
    cut_at_stop: int = 0
    cut_by_timeout: int = 0
    cut_by_reset: int = 0
    cut_by_error: int = 0
    cut_elapsed_ns_max: int = 0
    # requests sent inside the window still awaiting their first token at the stop, and
    # the longest wait (their TTFT was at least that)
    waiting_at_stop: int = 0
    waiting_ns_max: int = 0
    # a stream's last gap cut by its idle or total timeout (at least the time it waited)
    censored_gaps: int = 0
    censored_gap_ns_max: int = 0
    retransmitting_requests: int = 0  # requests whose connection retransmitted (TCP_INFO)
    # requests by the clock their token events were stamped on (``ARRIVAL_CLOCKS``)
    stamped_segment: int = 0  # every read cut into its segments' own stamps
    stamped_kernel: int = 0
    stamped_user: int = 0
    departed_from_tap: int = 0  # requests whose t_send is their departure seen by the tap
    read_in_batches: int = 0  # requests whose body was read in batches (``loop_reads``)
    bodies_after_end: int = 0  # requests whose body went on past their final event
    over_max_tokens: int = 0  # successful requests that got more tokens than they asked for
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
    first_gap_wall_ns: int = 0  # the earliest gap inside the window (its earlier event)
    last_token_wall_ns: int = 0

    def add(self, other: ClassCounters) -> None:
        for name in _SUMMED_COUNTERS:
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for name in _MAX_COUNTERS:
            setattr(self, name, max(getattr(self, name), getattr(other, name)))
        room = MAX_INTERRUPTED_IDS - len(self.interrupted_ids)
        self.interrupted_ids.extend(other.interrupted_ids[: max(room, 0)])
        self.errors.update(other.errors)
        for name in ("first_send_wall_ns", "first_gap_wall_ns"):  # 0: none yet
            if theirs := getattr(other, name):
                ours = getattr(self, name)
                setattr(self, name, min(ours, theirs) if ours else theirs)
        self.last_token_wall_ns = max(self.last_token_wall_ns, other.last_token_wall_ns)

    def add_fields(self, data: Mapping[str, Any]) -> None:
        """``add`` of counters in their encoded form (``to_dict``), which may leave out
        fields that are 0 or empty (a worker's delta: most of its ~70 are) and may have
        fields this version does not know (ignored); the values are checked already. The
        master's path; ``add`` stays field by field, the reference its test holds it to."""
        for name, value in data.items():
            rule = _MERGE_RULES.get(name)
            if rule is _SUM:
                setattr(self, name, getattr(self, name) + value)
            elif rule is _LARGEST:
                setattr(self, name, max(getattr(self, name), value))
            elif rule is _EARLIEST:  # 0: none yet
                if value:
                    ours = getattr(self, name)
                    setattr(self, name, min(ours, value) if ours else value)
            elif name == "interrupted_ids":
                room = MAX_INTERRUPTED_IDS - len(self.interrupted_ids)
                self.interrupted_ids.extend(value[: max(room, 0)])
            elif name == "errors":
                self.errors.update(value)

    def arrival_clocks(self) -> dict[str, int]:
        """Requests per clock their tokens were stamped on, the clocks seen only."""
        counts = {clock: getattr(self, ARRIVAL_CLOCK_COUNTERS[clock]) for clock in ARRIVAL_CLOCKS}
        return {clock: count for clock, count in counts.items() if count}

    def count_sources(self) -> dict[str, int]:
        """Requests per source of their k_i (``COUNT_SOURCES``), the sources seen only."""
        counts = {source: getattr(self, COUNT_SOURCE_COUNTERS[source]) for source in COUNT_SOURCES}
        return {source: count for source, count in counts.items() if count}

    def to_dict(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "errors"}
        data["errors"] = dict(self.errors)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ClassCounters:
        known = {f.name for f in fields(cls)} - {"errors"}
        counters = cls(**{k: v for k, v in data.items() if k in known})
        counters.errors = Counter(data.get("errors", {}))
        return counters


# Where a stream that had a token event was cut, by its category: the counter it adds to
# (any other failure mid-stream: ``cut_by_error``).
CUT_WHERE = {
    INTERRUPTED: "cut_at_stop",
    TIMEOUT_IDLE: "cut_by_timeout",
    TIMEOUT_TOTAL: "cut_by_timeout",
    CONNECTION_RESET: "cut_by_reset",
    TRUNCATED: "cut_by_reset",
}

# Plain int counters (not a mapping): they add, merge and are shape-checked as the others.
COUNT_SOURCE_COUNTERS = {source: f"counted_by_{source}" for source in COUNT_SOURCES}
ARRIVAL_CLOCK_COUNTERS = {clock: f"stamped_{clock}" for clock in ARRIVAL_CLOCKS}
# Every int counter adds, but the wall-clock bounds (min and max instead) and ``_max``es.
_MAX_COUNTERS = tuple(f.name for f in fields(ClassCounters) if f.name.endswith("_max"))
_SUMMED_COUNTERS = tuple(
    f.name
    for f in fields(ClassCounters)
    if f.type == "int" and not f.name.endswith(("_wall_ns", "_max"))
)
# How each int counter merges: summed; the largest (``_max``es and the last token's wall
# time); the earliest that is not 0 (the first send, the first gap)
_SUM, _LARGEST, _EARLIEST = "sum", "largest", "earliest"
_MERGE_RULES = (
    dict.fromkeys(_SUMMED_COUNTERS, _SUM)
    | dict.fromkeys((*_MAX_COUNTERS, "last_token_wall_ns"), _LARGEST)
    | dict.fromkeys(("first_send_wall_ns", "first_gap_wall_ns"), _EARLIEST)
)


@dataclass
class ClassMetrics:
    histograms: dict[str, HdrHistogram] = field(default_factory=dict)  # made on first use
    counters: ClassCounters = field(default_factory=ClassCounters)
    tail_gaps: list[dict[str, Any]] = field(default_factory=list)  # largest first (tail_gaps)

    @property
    def worst_gaps(self) -> list[dict[str, Any]]:
        return self.tail_gaps[:WORST_GAPS_SHOWN]

    def histogram(self, name: str) -> HdrHistogram:
        """The histogram ``name``, made on first use: a name the catalogue does not declare
        (``histogram_names``) is an ``UndeclaredHistogram`` at once."""
        histogram = self.histograms.get(name)
        if histogram is None:
            histogram = self.histograms[check_declared(name)] = new_histogram()
        return histogram

    def read(self, name: str) -> HdrHistogram:
        """The histogram ``name`` to read: where none was recorded, an empty one shared by
        every reader, never kept (a summary that made one a metric a class, ~185 KiB each,
        took 1.2 GB for a results file of 500 small classes). Never record into it."""
        histogram = self.histograms.get(name)
        if histogram is not None:
            return histogram
        check_declared(name)
        return _empty_histogram()

    def merged_into(self, name: str) -> HdrHistogram:
        """The histogram ``name`` to add one already made into (a worker's delta, saved
        results), made on first use whatever its name: the version that made it named it."""
        histogram = self.histograms.get(name)
        if histogram is None:
            histogram = self.histograms[name] = new_histogram()
        return histogram

    def add(self, other: ClassMetrics, cooperative: bool = False) -> None:
        """``cooperative``: yield before each histogram (~50 us each; a set has ~20), for
        a process whose users stream meanwhile; only where nothing else changes ``other``.
        """
        for name, histogram in other.histograms.items():
            if cooperative:
                let_streams_run()
            add_into(self.merged_into(name), histogram)
        self.counters.add(other.counters)
        self.add_tail_gaps(other.tail_gaps)

    def add_tail_gaps(self, gaps: list[dict[str, Any]]) -> None:
        self.tail_gaps = merge_tail(self.tail_gaps, gaps)


_EMPTY: list[HdrHistogram] = []


def _empty_histogram() -> HdrHistogram:
    """The one empty histogram readers share (``ClassMetrics.read``), made on first use."""
    if not _EMPTY:
        _EMPTY.append(new_histogram())
    return _EMPTY[0]


def count_tokens(counters: ClassCounters, timings: RequestTimings) -> None:
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
        counters.prompt_difference_max = max(
            counters.prompt_difference_max, abs(reported - requested)
        )
    if timings.cached_prompt_tokens is not None:
        counters.cache_reported_requests += 1
        counters.cached_prompt_tokens += timings.cached_prompt_tokens
        counters.cache_reported_prompt_tokens += requested if reported is None else reported


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
