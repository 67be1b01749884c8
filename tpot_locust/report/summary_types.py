"""The shape of ``summary.json``, in one home: TypedDicts (the run's facts a dataclass,
``common.run_facts``), so that a renamed or misspelled key fails the type check (``mypy``,
run by CI), not a user's report.

At run time a summary is a plain dict (``report.summary.build_summary`` builds it, the end
of a run adds to it: ``report.finishing``); nothing here is checked then. A saved summary
read back is checked by ``report.saved_results`` with checks derived from these types
(``report.json_checks.shaped``: a key added here is checked there; ``Bounds`` in
``Annotated`` say how much of a value a file may hold), and docs/report.md's key list is
tested against them (tests/unit/test_report_doc.py). A key is required where a reader of a
saved file relies on it; every other may be missing (``total=False``): a part that failed
at the end of a run is left out, older files lack newer keys. Keys that are no
identifier (a metric's ``p99.9``) take the functional form; their readers index with a
``common.percentiles.PercentileKey`` or ``Statistic``. Parts keyed by names chosen at run
time (a metric's, a cause's, a class's) are ``dict[str, ...]``.
"""

from __future__ import annotations

from typing import Annotated, Literal, TypedDict

from tpot_locust.common.bounds import Bounds, Name, NonNegative, ShortText
from tpot_locust.common.run_facts import RunFacts, TimeseriesPoint, Workers

# The functional form: a percentile's key ("p99.9") is no identifier.
_Percentiles = TypedDict(
    "_Percentiles",
    {"p50": float, "p90": float, "p99": float, "p99.9": float, "p99.99": float},
    total=False,
)


class SetAside(_Percentiles, total=False):
    """``client_stall["set_aside"]``: a metric's figures with its stalled samples left out."""

    count: int
    max: float


class StallFigures(TypedDict, total=False):
    """``metrics[name]["client_stall"]``: the samples that overlapped client stalls."""

    count: int
    above: dict[str, int]  # per percentile key: how many lie above it
    max: float
    set_aside: SetAside


_RatioToMedian = TypedDict(
    "_RatioToMedian",
    {"skew_mean_over_median": "float | None", "tail_p99.99_over_median": "float | None"},
    total=False,
)


class MetricFigures(_Percentiles, _RatioToMedian, total=False):
    """A metric's figures in ms (``report.metric_figures.metric_summary``)."""

    unit: ShortText
    count: int
    mean: float
    max: float
    min: float
    above: dict[str, int]  # per percentile key: the samples above it
    unmeasured_tail: list[str]  # the percentile keys too few samples measured
    client_stall: StallFigures
    failed: bool  # its summary failed at the end of the run: no samples
    # each percentile's 95 % interval [low, high] in ms, None where not measured
    # (``report.run_intervals``); the reason and how much longer, per key
    ci95: dict[str, list[float] | None]
    ci95_not_measured: dict[str, str]
    ci95_sections: int  # k: the sections the intervals were made of (t with k - 1 degrees)


class _RequestsEnded(TypedDict):
    ok: int
    failed: int


class RequestCounts(_RequestsEnded, total=False):
    """``summary["requests"]``: how the requests ended."""

    errors: dict[str, int]  # failed requests per error category
    interrupted: int  # cut off by the stop: counted in neither ok nor failed
    per_s: float  # ok requests per second of the window


class PromptComparison(TypedDict):
    """``tokens["prompt"]``: requested against server-counted prompt tokens."""

    requests: int
    requested: int
    reported: int
    mean_difference: float
    max_difference: int
    ratio: float | None


class PromptCache(TypedDict):
    """``tokens["prompt_cache"]``: the server's prefix-cache hits."""

    requests: int
    cached: int
    prompt: int
    hit_rate: float | None


class _TokenRate(TypedDict):
    per_s: NonNegative


class TokenCounts(_TokenRate, total=False):
    """``summary["tokens"]``: output, prompt, reasoning and cached tokens."""

    output: int
    estimated: bool  # some requests' counts were estimated (no usage from the server)
    estimated_requests: int
    over_max_tokens: int  # successful requests that got more tokens than their max_tokens
    partial: int  # tokens of failed requests
    prompt_requested: int
    prompt_reported: int
    window_reasoning: int  # tokens of the window's events before their first answer event
    window_answer: int  # the window's other tokens
    prompt: PromptComparison | None
    reasoning: int
    answer: int
    reasoning_requests: int
    prompt_cache: PromptCache | None
    count_source: dict[str, int]  # requests per source of the per-event counts


class Fluidity(TypedDict):
    """``summary["fluidity"]``: tokens against the pace's deadlines (``metrics.fluidity``)."""

    tokens: int
    late_tokens: int
    on_time_fraction: float
    late_requests: int


class _StallSize(TypedDict):
    ms: NonNegative
    at_wall_s: float


class WorstStall(_StallSize, total=False):
    """One of the client's longest stalls (``metrics.stalls``; ``histograms.json``'s too)."""

    worker: Name | None  # the worker it stalled on (a distributed run)
    gc: Annotated[int, Bounds(0, 2)] | None  # the generation its garbage collector ran
    at_s: float | None  # since the run's start (the summary's only)


class _GapSize(TypedDict):
    ms: NonNegative


class TailGap(_GapSize, total=False):
    """One of the largest token gaps (``metrics.tail_gaps``; ``histograms.json``'s too)."""

    phase: ShortText
    at_wall_s: float
    request_id: Name
    client_stall: bool
    gap: int  # its index in its request
    causes: Annotated[list[ShortText], Bounds(items=100)]
    prefill_tokens: int
    prefill_requests: int
    prefill_overlapped: bool
    pause_streams: int


class StoriedGap(TailGap, total=False):
    """One of ``attribution["worst"]``: a largest gap and its one-line story."""

    story: str


class TailShares(TypedDict):
    """``attribution[metric][percentile key]``: the samples above one tail's threshold and
    the share of them that overlapped each cause (``report.attribution``)."""

    above_ms: float
    samples: int
    shares: dict[str, float | None]  # per cause, and "none"; None: no sample above


class Attribution(TypedDict, total=False):
    """``summary["attribution"]``: "Why the tail" (``report.attribution``). Beside these
    keys, one per metric kept per cause (``catalogue.names("causes")``: tpot, itl), each a
    ``dict[str, TailShares]`` per tail percentile key: keys a TypedDict cannot declare
    without naming the metrics (PEP 728's ``extra_items``, which mypy does not read yet), so
    ``report.attribution.metric_tails`` reads them."""

    note: str
    prefill_tokens: dict[str, int | None]  # "all_gaps_median", and "<tail key>_median"
    worst: list[StoriedGap]
    tail_gaps: list[TailGap]  # every kept largest gap (for the truth's check)


class ClientFigures(TypedDict, total=False):
    """``summary["client"]``: the load generator's own health (read delays, its loops)."""

    read_delay_p90_ms: float | None  # what ``busy`` judges
    read_delay_p99_ms: float | None
    busy: bool | None  # None: no read carried a kernel stamp
    arrival_clocks: dict[str, int]  # requests per clock their tokens were stamped on
    departed_from_tap: int  # requests whose t_send is their departure seen by the tap
    read_in_batches: int  # requests whose body was read in batches (run.read_batch_ms)
    bodies_after_end: int  # requests whose body went on past their final event ([DONE])
    shared_stamp_events: int
    multi_event_reads: int
    # the whole run only (``client_health``):
    loop_lag: dict[str, float]  # count, a key per percentile, max
    stalls: int
    stalled_ms: float
    gc_stalls: int  # of the stalls, those while this client's garbage collector ran
    gc_stalled_ms: float
    loop_held_share: float | None  # of the watched time, held in stalls (``ClientHealth``)
    loop_saturated: bool  # held over ``LOOP_SATURATED_SHARE``: busy, however late its reads
    worst_stalls: list[WorstStall]
    stall_threshold_ms: float | None
    # what reading cost (``client_cost``): the stamping processes' CPU while their loops
    # were watched, per token that arrived, and the tokens/s one core would read at that
    cpu_s: float
    cpu_us_per_token: float | None
    tokens_per_core_s: int | None


class Interference(TypedDict):
    """``summary["interference"]``: steady against burst gaps (``metrics.interference``)."""

    # per phase (steady, burst), per metric (tpot, itl): count, a key per percentile
    # (p50 ... p99.9) and the percentiles too few samples measured ("unmeasured")
    phases: dict[str, dict[str, dict[str, float | list[str]]]]
    # per metric, per percentile: burst over steady; None where steady had no sample
    interference_factor: dict[str, dict[str, float | None]]


class Excluded(TypedDict):
    """``summary["excluded"]``: requests left out of the figures, by phase."""

    warmup: int
    cooldown: int


class CutStreams(TypedDict):
    """``window["cut"]``: streams cut after a token event, by where."""

    stop: int
    timeout: int
    reset: int
    error: int


class Window(TypedDict, total=False):
    """``summary["window"]``: what the window in token time held (docs/metrics.md, "The
    window"): every gap that arrived in it, whatever its request's fate."""

    gaps: int  # token gaps measured (ITL samples)
    tokens: int  # tokens of the token events that arrived in it
    gaps_after: int  # gaps that came after its end (a graceful stop's drain): not counted
    cut: CutStreams
    cut_elapsed_s_max: float  # the longest cut stream, send to cut: its E2E at least this
    waiting_at_stop: int  # sent inside it, no first token at the stop
    waiting_s_max: float  # their longest wait: a TTFT at least this
    censored_gaps: int  # a stream's last gap cut by its idle or total timeout
    censored_gap_s_max: float  # the longest: a gap at least this


class BurstCounts(TypedDict):
    """``summary["bursts"]``: the scheduled bursts' requests."""

    due: int  # their time came
    sent: int
    late: int  # sent over ``metric_set.BURST_LATE_S`` after it


class Goodput(TypedDict):
    """``summary["goodput"]``: requests that met every per-request SLO."""

    limits_ms: dict[str, float]
    good: int
    per_s: NonNegative
    fraction: float | None  # of the requests that ended; None when none did


class ClassSummary(TypedDict, total=False):
    """The figures of one scope: the whole run (the top of ``Summary``) or one user class
    (``summary["classes"][name]``); ``report.summary._class_summary`` builds them."""

    metrics: dict[str, MetricFigures]  # per metric name (ttft, tpot, itl, ...)
    client: ClientFigures
    requests: RequestCounts
    tokens: TokenCounts
    window_s: float
    window: Window
    clamped_values: int
    excluded: Excluded
    dropped_arrivals: int
    bursts: BurstCounts | None  # None: the scenario has no bursts
    interference: Interference | None  # None: no gap fell in a burst
    attribution: Attribution | None  # None: no token gap yet
    worst_gaps: list[TailGap]
    goodput: Goodput | None  # None: the scenario set no per-request SLO
    fluidity: Fluidity | None  # None: the scenario set no pace


class CauseScore(TypedDict):
    """One cause in the attribution check: true gaps, ours tagged, both; their ratios."""

    true: int
    tagged: int
    both: int
    precision: float | None
    recall: float | None


class _TailLevel(TypedDict, total=False):
    percentile: float
    threshold_ms: float
    tail_gaps: int
    causes: dict[str, CauseScore]  # per checked cause
    true_tail_causes: dict[str, int]  # the truth's gaps per cause, "prefill_overlapped", "none"


class LowerLevel(_TailLevel, total=False):
    """``attribution_check["p99"]``: the same above P99, over the gaps ours listed."""

    present: int
    ours_none: float | None


class TailCoverage(TypedDict, total=False):
    """``attribution_check["coverage"]``: the true tail's gaps ours listed."""

    present: int
    of: int
    share: float | None
    ours_listed: int
    worst_ms_error: float | None


class TruePrefillTokens(TypedDict, total=False):
    rule: str
    tail_median: float | None
    all_median: float | None


class ThresholdMet(TypedDict, total=False):
    """A stated (not enforced) threshold: a cause's precision or recall at least this."""

    cause: str
    measure: str
    at_least: float
    value: float | None
    met: bool | None


class AttributionCheck(_TailLevel, total=False):
    """``summary["attribution_check"]``: our causes against the simulator's true ones
    above the true ITL P99.9 (``report.attribution_check``)."""

    available: bool
    why: str  # when not available
    true_gaps: int
    requests: int
    coverage: TailCoverage
    true_prefill_tokens: TruePrefillTokens
    unstepped_gaps: int
    thresholds: list[ThresholdMet]
    p99: LowerLevel


Mark = Literal["pass", "fail", "insufficient", "invalid"]  # a check's, a run's verdict


class _CheckVerdict(TypedDict):
    name: str
    verdict: Mark
    why: str


# ``class`` is a keyword: the functional form
_CheckFigures = TypedDict(
    "_CheckFigures",
    {
        "kind": str,
        "metric": str,
        "class": "str | None",
        "model": "str | None",
        "statistic": "str | None",
        "limit": float,
        "unit": ShortText,
        "measured": "float | None",
        "samples_above": "int | None",
    },
    total=False,
)


class CheckRecord(_CheckVerdict, _CheckFigures):
    """One objective's verdict in ``verdict.json`` (``report.gate.Check.to_dict``)."""


class _VerdictCore(TypedDict):
    verdict: Mark
    exit_code: Annotated[int, Bounds(0, 255)]
    checks: list[CheckRecord]
    run_invalid: list[str]
    warnings: list[str]


class Verdict(_VerdictCore, total=False):
    """``summary["slo"]`` and ``verdict.json``: the gate's verdict (``report.gate``)."""

    insufficient_policy: ShortText | None
    client_stalls_policy: ShortText


class TruthRow(TypedDict, total=False):
    """One statistic of ``truth_check["metrics"][name]``: measured, true and their error
    (the count row has no error); with client stalls set aside, the same again."""

    measured: float | None
    true: float | None
    error: float | None
    stall_free: float | None
    true_stall_free: float | None
    stall_free_error: float | None


class Coverage(TypedDict, total=False):
    """``truth_check["coverage"]``: the window's token gaps, measured against true."""

    measured: int
    true: int
    share: NonNegative | None
    agrees: bool


class _SentAtOnce(TypedDict, total=False):
    """``SimSchedule``'s figures of the client holding the server (absent from results
    saved before they were counted)."""

    # the token events of the window's requests that left when written (kernel-stamped within
    # their write), their share, and whether the client held the server (``client_held``);
    # None where the truth kept no kernel stamps (older, or ``--truth-loop-sends``)
    sent_at_once: int | None
    sent_at_once_share: float | None
    client_held: bool | None


class SimSchedule(_SentAtOnce):
    """``truth_check["schedule"]``: the embedded simulator against its own schedule over the
    window (``common.sim_schedule``): its token events, those that left late, and whether it
    fell behind."""

    events: int
    late: int
    late_share: float | None
    late_max_ms: float
    late_after_ms: float
    behind: bool


class TruthCheck(TypedDict, total=False):
    """``summary["truth_check"]``: the run against the simulator's truth
    (``report.truth_check``)."""

    tolerance_ms: float | None
    passed: bool | None  # None: no tolerance given, nothing to pass
    worst_error_ms: float | None
    coverage: Coverage | None
    metrics: dict[str, dict[str, TruthRow]]  # per metric, per statistic (p50 ... max, count)
    schedule: SimSchedule | None  # None: a truth from a simulator that did not record it


class Summary(ClassSummary, total=False):
    """``summary.json``: the whole run's figures and, added to them, the run's parts."""

    classes: dict[str, Summary]  # per class: its ``ClassSummary`` keys only
    # per model, when a class split its traffic over models (``classes.<name>.model``)
    models: dict[str, Summary]
    timeseries: list[TimeseriesPoint]  # one point per report interval
    complete: bool  # False: a worker was lost or a part failed (``report_error``)
    workers: Workers
    run: RunFacts  # the run's facts (``common.run_facts``)
    report_error: str  # the parts that failed at the end of the run
    # the end of a run (``report.finishing``)
    slo: Verdict  # the verdict (``report.gate.evaluate``)
    truth_check: TruthCheck  # ``report.truth_check``
    attribution_check: AttributionCheck  # ``report.attribution_check``
    # the web UI's /tpot/summary.json (``harness.web.webui``)
    running: bool
    test: int  # the test of this web-UI session
