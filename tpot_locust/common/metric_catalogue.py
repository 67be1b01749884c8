"""The metric catalogue: one record per metric, and every list of metrics derived from it.

In the manner of k6's ``metrics/builtin.go``: a metric's name, titles, unit, what one
sample is, and where it goes (phases, causes, stall tagging, SLOs, goodput, the report's
tables and charts, the web UI's tab, the truth check) are said here once. The recorder,
the gap tagger, the reports, the SLO schema, the web tab and the truth check take their
lists from ``names(...)``, and every histogram's name from ``metrics.histogram_names``,
which refuses any other; adding a metric is one record plus the code that measures it
(``metrics.samples``; docs/extending.md, "A metric"). What each figure means, clock by
clock, is in docs/metrics.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# The scope of every class together: the reports, compare, gates and the live metrics call
# it so, and no traffic class may take the name (scenario.schema).
ALL_CLASSES = "all"


# What a record's histogram counts (``unit``). Time: a request's timings are in ns, its
# histograms' values whole microseconds (``common.timings.to_us``), the summary's in ms.
US = "us"
TOKENS = "tokens"
# What a record is (``kind``): a histogram per metric group. The counters, every one a
# total, are declared as the fields of ``metrics.metric_set.ClassCounters``, not here.
HISTOGRAM = "histogram"
# What a client stall must overlap for a sample to be set aside (``stall_span``, of the
# ``stall_tagged``): its own gap (a sample per gap between token events), any gap of its
# request, its request's largest gap, or its request's send to send + its value
GAP = "gap"
ANY_GAP = "any_gap"
LARGEST_GAP = "largest_gap"
FROM_SEND = "from_send"


@dataclass(frozen=True)
class Metric:
    name: str  # the key in summary.json, histograms/<name>.hlog, SLOs
    short: str  # the table's label: "TPOT"
    title: str  # the terminal report's heading
    sample: str  # one sample per what
    unit: str = US  # of its histogram's values (the summary shows time in ms)
    kind: str = HISTOGRAM
    stall_span: str = ""  # what a stall must overlap, if it is stall_tagged
    per_token: bool = False  # a per-token gap: its median also shown as tokens/s
    phased: bool = False  # kept per phase (steady, burst) for the interference table
    causes: bool = False  # kept per cause (metric@prefill, ...) for "Why the tail"
    stall_tagged: bool = False  # samples overlapping a client stall are set aside
    gateable: bool = False  # an SLO may name it (slo.latency)
    goodput: bool = False  # a per-request threshold of goodput may name it
    in_table: bool = False  # report.html's percentile table
    in_charts: bool = False  # report.html's distribution charts
    in_tab: bool = False  # the web UI's TPOT tab
    in_timeseries: bool = False  # the live charts and the time series
    in_compare: bool = False  # `tpot-locust compare` by default
    truth_checked: bool = False  # compared with the simulator's truth
    exported: bool = False  # the live Prometheus endpoint (report.live_metrics)
    # the nearest metric of other tools, and how it differs where it does
    peers: dict[str, str] = field(default_factory=dict)


TPOT = Metric(
    "tpot",
    "TPOT",
    "TPOT: gap of every output token after the first, token-weighted",
    "output token after the first",
    per_token=True,
    phased=True,
    causes=True,
    stall_tagged=True,
    stall_span=GAP,
    gateable=True,
    in_table=True,
    in_charts=True,
    in_tab=True,
    exported=True,
    in_timeseries=True,
    in_compare=True,
    truth_checked=True,
    peers={
        "vLLM": "none (its tpot is our request_tpot)",
        "AIPerf": "none",
        "guidellm": "none (its time_per_output_token counts the first token)",
    },
)

ITL = Metric(
    "itl",
    "ITL",
    "ITL: gap between consecutive token events (inter-chunk latency)",
    "token event after the first",
    per_token=True,
    phased=True,
    causes=True,
    stall_tagged=True,
    stall_span=GAP,
    gateable=True,
    in_table=True,
    in_charts=True,
    in_tab=True,
    exported=True,
    in_timeseries=True,
    in_compare=True,
    truth_checked=True,
    peers={
        "vLLM": "itl",
        "SGLang": "itl",
        "AIPerf": "none (its inter_token_latency is our request_tpot)",
        "guidellm": "none (its inter_token_latency is our request_tpot)",
    },
)

REQUEST_TPOT = Metric(
    "request_tpot",
    "Request TPOT",
    "Request TPOT: (last - first event) / (tokens after the first event)",
    "request with a token after its first event",
    stall_tagged=True,
    stall_span=ANY_GAP,
    gateable=True,
    goodput=True,
    in_table=True,
    in_tab=True,
    exported=True,
    in_compare=True,
    peers={
        "vLLM": "tpot",
        "SGLang": "tpot",
        "AIPerf": "inter_token_latency",
        "guidellm": "inter_token_latency",
    },
)

TTFT = Metric(
    "ttft",
    "TTFT",
    "TTFT: send -> first token event",
    "request",
    stall_tagged=True,
    stall_span=FROM_SEND,
    gateable=True,
    goodput=True,
    in_table=True,
    in_charts=True,
    in_tab=True,
    exported=True,
    in_timeseries=True,
    in_compare=True,
    truth_checked=True,
    peers={
        "vLLM": "ttft",
        "SGLang": "ttft",
        "AIPerf": "time_to_first_token",
        "guidellm": "time_to_first_token",
    },
)

TTFAT = Metric(
    "ttfat",
    "TTFAT",
    "TTFAT: send -> first answer token event (after the reasoning)",
    "request with an answer token",
    gateable=True,
    in_table=True,
    peers={"AIPerf": "time_to_first_output_token (reasoning models)"},
)

E2E = Metric(
    "e2e",
    "E2E",
    "E2E: send -> last token event",
    "request",
    stall_tagged=True,
    stall_span=FROM_SEND,
    gateable=True,
    goodput=True,
    in_table=True,
    in_charts=True,
    in_tab=True,
    exported=True,
    in_compare=True,
    peers={
        "vLLM": "e2el",
        "SGLang": "e2e_latency",
        "AIPerf": "request_latency",
        "guidellm": "request_latency",
    },
)

WORST_GAP = Metric(
    "worst_gap",
    "Worst gap",
    "Worst gap: largest ITL of each request",
    "request with two token events or more",
    stall_tagged=True,
    stall_span=LARGEST_GAP,
    gateable=True,
    goodput=True,
    in_table=True,
    in_tab=True,
)

STALL_TIME = Metric(
    "stall_time",
    "Stall time",
    "Stall time: per request, the time the reader waited beyond the pace's deadlines",
    "request, with slo.pace",
    gateable=True,
    in_table=True,
    peers={"Etalon": "fluidity-index's missed deadlines, as time"},
)

TTFT_FROM_INTENDED = Metric(
    "ttft_from_intended",
    "TTFT from intended",
    "TTFT from intended: open-loop arrival time -> first token event",
    "first request of an open-loop session",
    gateable=True,
)

SCHEDULE_LAG = Metric(
    "schedule_lag",
    "Schedule lag",
    "Schedule lag: open-loop arrival time -> send (client queueing)",
    "first request of an open-loop session",
    gateable=True,
)

READ_DELAY = Metric(
    "read_delay",
    "Read delay",
    "Read delay: kernel receipt of a read's bytes -> this client reading them",
    "socket read (kernel stamps only)",
    in_tab=True,
    in_timeseries=True,
)
CATALOGUE: tuple[Metric, ...] = (
    TPOT,
    ITL,
    REQUEST_TPOT,
    TTFT,
    TTFAT,
    E2E,
    WORST_GAP,
    STALL_TIME,
    TTFT_FROM_INTENDED,
    SCHEDULE_LAG,
    READ_DELAY,
)
BY_NAME: dict[str, Metric] = {metric.name: metric for metric in CATALOGUE}

# A histogram the recorder keeps that is no metric of the summary: the prompt tokens in
# prefill, over every process, during each token gap (report.attribution's "Why the tail")
PREFILL_TOKENS_AT_GAP = Metric(
    "prefill_tokens_at_gap",
    "Prefill at gap",
    "Prompt tokens in prefill during a token gap",
    "token gap",
    unit=TOKENS,
)
AUXILIARY: tuple[Metric, ...] = (PREFILL_TOKENS_AT_GAP,)


def names(where: str | None = None) -> tuple[str, ...]:
    """The metrics' names in catalogue order; with ``where`` (a flag: ``"gateable"``...),
    only those that have it."""
    if where is not None and where not in Metric.__dataclass_fields__:
        raise KeyError(where)
    return tuple(m.name for m in CATALOGUE if where is None or getattr(m, where))


def titles() -> dict[str, str]:
    return {metric.name: metric.title for metric in CATALOGUE}


def shorts() -> dict[str, str]:
    return {metric.name: metric.short for metric in CATALOGUE}
