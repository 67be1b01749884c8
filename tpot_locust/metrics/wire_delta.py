"""A worker's delta on the wire (``encode_delta``) and as the master reads it (``WireDelta``).

The master adds each worker's delta once a second; building a ``MetricSet`` of fresh
``HdrHistogram`` objects for it cost 4.5-6 ms a busy report (1,000 busy workers: 5-6
cores). A ``WireDelta`` keeps each histogram as its span of buckets (``span_counts``) and its
new tail gaps as columns (``wire_tail``), and is added straight into the master's sets
(``add_to``): ~0.43 ms a busy report (``benchmarks/README.md``, merge). Every part is
checked while it is read, before anything is added: a damaged or hostile delta is refused
whole, never half merged.

Saved results keep ``MetricSet.encode``'s form (HdrHistogram V2 blobs, readable by other
tools); this form is only ever read by the same version that wrote it (``DELTA_FORMAT``).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from tpot_locust.metrics.histograms import HistogramDecodeError
from tpot_locust.metrics.metric_set import MAX_INTERRUPTED_IDS, ClassCounters, MetricSet
from tpot_locust.metrics.span_counts import BucketSpan, pack_spans, unpack_spans
from tpot_locust.metrics.stalls import CLIENT_SCALARS, WORST_STALLS_KEPT, ClientHealth
from tpot_locust.metrics.tail_gaps import TAIL_GAPS_KEPT
from tpot_locust.metrics.wire_tail import INT_LIMIT, WireTail, check_sizes, pack_tail, unpack_tail

MAX_GROUPS = 1000  # metric groups in one delta (classes x models)
MAX_TEXT_CHARS = 200  # a group's name, an error's category, a request id
MAX_ERROR_KINDS = 1000
_INT_COUNTERS = frozenset(f.name for f in fields(ClassCounters) if f.type == "int")


@dataclass
class WireGroup:
    """One metric group of a delta: its histograms' buckets, counters and new tail gaps."""

    histograms: dict[str, BucketSpan]
    counters: dict[str, Any]  # ``ClassCounters.to_dict``'s, its zeros left out
    tail: WireTail


@dataclass
class WireClient:
    """A worker's loop health of the interval: ``ClientHealth`` with its lags as buckets."""

    loop_lag: BucketSpan | None
    scalars: dict[str, int]
    worst_stalls: list[dict[str, Any]]

    def name_worker(self, worker: str) -> None:
        for stall in self.worst_stalls:
            stall["worker"] = stall.get("worker") or worker

    def add_to(self, health: ClientHealth) -> None:
        if self.loop_lag is not None:
            self.loop_lag.add_to(health.loop_lag)
        health.add_scalars(self.scalars, self.worst_stalls)


@dataclass
class WireDelta:
    groups: dict[str, WireGroup]
    client: WireClient

    def add_to(self, total: MetricSet, bound_for: MetricSet | None = None) -> None:
        """Exactly what ``total.add`` of this delta as a ``MetricSet`` does; but for tail
        gaps that could not enter ``bound_for``'s kept set (a collector's totals, which its
        interval ``total`` goes into, and whose smallest kept gap only ever rises)."""
        for group, wire in self.groups.items():
            metrics = total.for_group(group)
            for name, counts in wire.histograms.items():
                counts.add_to(metrics.merged_into(name))
            metrics.counters.add_fields(wire.counters)
            floors = [_floor(metrics.tail_gaps)]  # only gaps above can enter a full set
            if bound_for is not None and group in bound_for.groups:
                floors.append(_floor(bound_for.groups[group].tail_gaps))
            floor = max((f for f in floors if f is not None), default=None)
            metrics.add_tail_gaps(wire.tail.above(floor))
        self.client.add_to(total.client)

    def to_metric_set(self) -> MetricSet:
        metric_set = MetricSet()
        self.add_to(metric_set)
        return metric_set


def _floor(kept: list[dict[str, Any]]) -> float | None:
    """The smallest kept gap of a full set (a gap no larger cannot enter it), else None."""
    return kept[TAIL_GAPS_KEPT - 1]["ms"] if len(kept) >= TAIL_GAPS_KEPT else None


def encode_delta(delta: MetricSet, cooperative: bool = False) -> dict[str, Any]:
    """A worker's delta in the wire form (msgpack-safe): its counters and new tail gaps per
    group, and every histogram (the loop lag's owner: one past the groups) in one block
    (~1 ms for a busy delta, in pieces of ~50 us between yields when ``cooperative``)."""
    client = delta.client
    groups = list(delta.groups.items())
    histograms = [
        (owner, name, histogram)
        for owner, (_, metrics) in enumerate(groups)
        for name, histogram in metrics.histograms.items()
    ]
    histograms.append((len(groups), "loop_lag", client.loop_lag))
    return {
        "groups": {
            group: {
                "counters": {
                    name: value for name, value in metrics.counters.to_dict().items() if value
                },
                "tail_gaps": pack_tail(metrics.tail_gaps),
            }
            for group, metrics in groups
        },
        "histograms": pack_spans(histograms, cooperative),
        "client": {
            "worst_stalls": client.worst_stalls,
            **{name: getattr(client, name) for name in CLIENT_SCALARS},
        },
    }


def decode_delta(data: Any) -> WireDelta:
    """The wire form read back and checked; ``HistogramDecodeError`` names what is wrong."""
    if not isinstance(data, dict):
        raise HistogramDecodeError("delta: not a mapping")
    groups = data.get("groups")
    if not isinstance(groups, dict) or len(groups) > MAX_GROUPS:
        raise HistogramDecodeError(f"delta: groups not a mapping of at most {MAX_GROUPS}")
    wire_groups = {}
    for group, encoded in groups.items():
        _check_text(group, "a group's name")
        if not isinstance(encoded, dict):
            raise HistogramDecodeError(f"groups.{group}: not a mapping")
        try:
            wire_groups[group] = WireGroup(
                {}, _counters(encoded.get("counters")), unpack_tail(encoded.get("tail_gaps"))
            )
        except HistogramDecodeError as error:
            raise HistogramDecodeError(f"groups.{group}: {error}") from None
    owners = list(wire_groups.values())
    client = _client(data.get("client"))
    for owner, name, span in unpack_spans(data.get("histograms"), len(owners) + 1):
        if owner < len(owners):
            owners[owner].histograms[name] = span
        elif name == "loop_lag":
            client.loop_lag = span
        else:
            raise HistogramDecodeError(f"client: a histogram {name!r}")
    return WireDelta(wire_groups, client)


def _client(data: Any) -> WireClient:
    if not isinstance(data, dict):
        raise HistogramDecodeError("client: not a mapping")
    try:
        scalars = {name: _count(data.get(name), name) for name in CLIENT_SCALARS}
        stalls = _sized_list(data.get("worst_stalls"), WORST_STALLS_KEPT, "worst_stalls")
    except HistogramDecodeError as error:
        raise HistogramDecodeError(f"client: {error}") from None
    return WireClient(None, scalars, stalls)


def _counters(data: Any) -> dict[str, Any]:
    """Every known int counter an int in [0, 2**63), the errors and ids bounded; unknown
    keys (a newer field) are left for ``ClassCounters.add_fields`` to ignore."""
    if not isinstance(data, dict):
        raise HistogramDecodeError("counters: not a mapping")
    for name, value in data.items():
        if name in _INT_COUNTERS:
            _count(value, f"counters.{name}")
    errors = data.get("errors", {})
    if not isinstance(errors, dict) or len(errors) > MAX_ERROR_KINDS:
        raise HistogramDecodeError("counters.errors: not a mapping of error counts")
    for kind, count in errors.items():
        _check_text(kind, "an error's category")
        _count(count, f"counters.errors.{kind}")
    ids = data.get("interrupted_ids", [])
    if not isinstance(ids, list) or len(ids) > MAX_INTERRUPTED_IDS:
        raise HistogramDecodeError("counters.interrupted_ids: not a short list")
    for request_id in ids:
        _check_text(request_id, "an interrupted request's id")
    return data


def _count(value: Any, what: str) -> int:
    if type(value) is not int or not 0 <= value < INT_LIMIT:
        raise HistogramDecodeError(f"{what}: {value!r} is not a count in [0, 2**63)")
    return value


def _sized_list(value: Any, limit: int, what: str) -> list[dict[str, Any]]:
    """A list of at most ``limit`` records, each with a finite, non-negative ``ms`` (what
    the merges sort by; the reports read the rest as they would from saved results)."""
    if not isinstance(value, list) or len(value) > limit:
        raise HistogramDecodeError(f"{what}: not a list of at most {limit}")
    if not all(isinstance(record, dict) for record in value):
        raise HistogramDecodeError(f"{what}: a record that is not a mapping")
    check_sizes([record.get("ms") for record in value], what)
    return value


def _check_text(value: Any, what: str) -> None:
    if not isinstance(value, str) or not 0 < len(value) <= MAX_TEXT_CHARS:
        raise HistogramDecodeError(f"{what} is not a text of 1 to {MAX_TEXT_CHARS} characters")
