"""The run's facts (``summary.json``'s and ``histograms.json``'s ``"run"``): one frozen
dataclass, gathered by the harness (``harness.run.run_facts_of``) and read by attribute in the
report, so that a misspelt fact fails the type check, not a report.

Here, in the lowest layer, because both the harness and the report read it. In JSON it is
the object it always was (``to_json``; ``from_json`` reads a saved one back): a fact that
is None is left out, unless it is one the run always writes (``nulls_kept``: a run with no
users given writes ``"users": null``), so the same run writes the same bytes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Annotated, Any, TypedDict, cast

from tpot_locust.common.bounds import Bounds, ByHand, Name, NonNegative, Share, ShortText

Span = Annotated[list[float], Bounds(items=2)]  # [start, end]
Window = Annotated[list[int], Bounds(items=2)]  # [start, end] in wall ns
UNCHECKED = ByHand("unchecked")  # read as it is: its readers take what they can


class Bursts(TypedDict, total=False):
    """``run.bursts``: the scheduled prefill bursts' windows."""

    windows: int
    failed: int  # no first token: no prefill, no window
    prefill_s: list[NonNegative]  # each burst's prefill, sorted
    spans_s: list[Span]  # [start, end] in seconds since the time series' start


class Prefill(TypedDict, total=False):
    """``run.prefill``: every request's prefill (send to first token), all processes."""

    windows: int
    long_prompt_tokens: int
    tokens_s: list[Span]  # [seconds since the series' start, most prompt tokens]


class GpuSummary(TypedDict, total=False):
    """``run.gpu_metrics[label].gpu``: a DCGM exporter's GPUs over the run."""

    samples: int
    gpus: int
    sm_clock_mhz: list[float]  # [lowest, highest]
    power_w_max: float | None
    temp_c_max: float | None
    slowed_samples: int
    slowing_reasons: list[str]
    xid_errors: list[int]
    sm_clock_series: list[list[float]]  # [wall s, lowest SM clock] per sample, thinned


class ServerMetrics(TypedDict, total=False):
    """``run.server_metrics`` (and each of ``run.gpu_metrics``): the sampler's summary
    (``harness.watch.server_sampler``)."""

    gpu: GpuSummary
    url: str | None
    engine: str | None
    interval_s: float
    samples: int
    slow: int
    failed: int
    notes: list[str]
    series: dict[str, list[float | None]]  # per series name (``server_windows.SERIES``)
    windows: dict[str, int]  # cause windows per server cause
    own_percentiles: dict[str, dict[str, Any]]  # the server's own, per metric (read as found)


class _WorkersSeen(TypedDict):
    seen: int
    reported_in_full: int
    missing: list[Name]  # those whose final report never came


class Workers(_WorkersSeen, total=False):
    """``summary["workers"]``: a distributed run's workers (``harness.run.distributed``)."""

    read_delay_p90_ms: dict[str, NonNegative]  # per worker: what ``! busy workers`` judges
    read_delay_p99_ms: dict[str, NonNegative]  # per worker
    stalls: dict[str, int]
    loop_lag_max_ms: dict[str, NonNegative]
    loop_held_share: dict[str, Share]  # per worker: what ``! busy workers`` also judges
    attribution: Annotated[dict[str, object], UNCHECKED]  # each worker's own cause shares
    ids: dict[str, Name]  # each worker's name (host#index) -> its Locust client id


# A metric's figures over one interval: its count and, the functional form as "p99.9" is no
# identifier, its percentiles up to P99.9 (``metrics.collector.TIMESERIES_PERCENTILES``).
IntervalFigures = TypedDict(
    "IntervalFigures",
    {"count": int, "p50": float, "p90": float, "p99": float, "p99.9": float},
    total=False,
)


class _PointTime(TypedDict):
    t: float  # since the run's start
    users: int


class _TimeseriesPoint(_PointTime, total=False):
    """One point of the time series per report interval (``metrics.collector``). Beside
    these keys, one per metric in the time series (``catalogue.names("in_timeseries")``)
    holds its ``IntervalFigures``: keys a TypedDict cannot declare without naming the
    metrics (PEP 728's ``extra_items``, which mypy does not read yet); ``interval_figures``
    reads them, and ``report.saved_results`` checks them by hand."""

    interval_s: NonNegative | None
    tokens_per_s: NonNegative | None  # None: a partial last interval, too short for a rate
    requests_ok: int
    requests_failed: int
    stalls: int
    loop_lag_max_ms: NonNegative | None
    partial: bool  # the run's last interval, shorter than the collector's least
    loop_held_share: Share


TimeseriesPoint = Annotated[_TimeseriesPoint, ByHand("timeseries point")]


def interval_figures(point: TimeseriesPoint, name: str) -> IntervalFigures:
    """A metric's figures in one point (``name`` one of ``catalogue.names("in_timeseries")``);
    empty where the point has none (an older file)."""
    # the per-metric keys ``_TimeseriesPoint`` cannot declare (its docstring)
    return cast(IntervalFigures, point.get(name) or {})


@dataclass(frozen=True)
class RunFacts:
    """What a run was: its target, load, clock and windows, and what its samplers saw.
    Every fact may be missing (None): an older file, or a run whose facts failed."""

    host: str | None = None
    complete: bool | None = None  # in the summary, its top level's (``Summary.complete``)
    version: ShortText | None = None
    users: int | None = None
    scenario: str | None = None
    settings: list[str] | None = None  # this test's own --tpot-set
    report_interval_s: NonNegative | None = None
    start_wall_s: NonNegative | None = None
    stopped_because: str | None = None
    stall_threshold_ms: NonNegative | None = None
    # the recorder's rule; its deadlines
    goodput_limits_ms: Annotated[dict[str, NonNegative], Bounds(items=100)] | None = None
    pace_ms: Annotated[dict[str, NonNegative], Bounds(items=2)] | None = None
    arrival_clock: str | None = None  # the master's: workers started otherwise may differ
    read_batch_ms: NonNegative | None = None
    workers: Workers | None = None  # in the summary, its top level's
    timeseries: list[TimeseriesPoint] | None = None  # in the summary, its top level's
    bursts: Bursts | None = None
    prefill: Prefill | None = None
    test: int | None = None  # of this web-UI session
    warmup_s: NonNegative | None = None
    cooldown_s: NonNegative | None = None
    duration_s: NonNegative | None = None
    clock_start_wall_ns: int | None = None
    window_wall_ns: Window | None = None  # the window in token time (metrics.md)
    # each process's own, by its request ids' prefix
    process_windows_wall_ns: Annotated[dict[str, Window], Bounds(items=10_000)] | None = None
    server_metrics: ServerMetrics | None = None  # checked by its shape: readers trust it
    gpu_metrics: Annotated[dict[str, ServerMetrics], Bounds(items=100)] | None = None  # by label
    report_error: str | None = None  # in the summary, its top level's
    recovered: str | None = None  # what a crashed run's results were rebuilt from (recovery)
    nulls_kept: frozenset[str] = field(default=frozenset(), repr=False, metadata={"json": 0})

    def __post_init__(self) -> None:
        """Only the facts that are None are kept as nulls: equal facts compare equal."""
        kept = frozenset(name for name in self.nulls_kept if getattr(self, name) is None)
        object.__setattr__(self, "nulls_kept", kept)

    def to_json(self) -> dict[str, object]:
        """The facts as ``summary.json`` holds them, in the order the run writes them."""
        return {
            name: value
            for name in FACT_NAMES
            if (value := getattr(self, name)) is not None or name in self.nulls_kept
        }

    @classmethod
    def from_json(cls, document: Mapping[str, Any]) -> RunFacts:
        """Facts read back (checked by ``report.saved_results``); unknown keys (a newer
        version's) are left out."""
        known = {name: document[name] for name in FACT_NAMES if name in document}
        nulls = frozenset(name for name, value in known.items() if value is None)
        return cls(**known, nulls_kept=nulls)

    def without(self, *names: str) -> RunFacts:
        """These facts left out (the summary keeps them at its top level)."""
        return replace(
            self, **dict.fromkeys(names, None), nulls_kept=self.nulls_kept.difference(names)
        )


def json_default(value: object) -> object:
    """``json.dumps``'s ``default``: a summary's facts as their JSON."""
    if isinstance(value, RunFacts):
        return value.to_json()
    raise TypeError(f"{type(value).__name__} is not JSON")


FACT_NAMES = tuple(f.name for f in fields(RunFacts) if f.metadata.get("json", 1))
NO_FACTS = RunFacts()  # a summary without any (a part that failed, an older file)
