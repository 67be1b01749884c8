"""The metric catalogue: one record per metric, and every list of metrics derived from it.

In the manner of k6's ``metrics/builtin.go``: a metric's name, titles, unit, what one
sample is, and where it goes (phases, causes, stall tagging, SLOs, goodput, the report's
tables and charts, the web UI's tab, the truth check) are said here once. The recorder,
the reports, the SLO schema, the web tab and the truth check take their lists from
``names(...)``; adding a metric is one record plus the code that measures it (a sample
method on ``RequestTimings`` or the recorder's own). What each figure means, clock by
clock, is in docs/metrics.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# The scope of every class together: the reports, compare, gates and the live metrics call
# it so, and no traffic class may take the name (scenario.schema).
ALL_CLASSES = "all"


@dataclass(frozen=True)
class Metric:
    name: str  # the key in summary.json, histograms/<name>.hlog, SLOs
    short: str  # the table's label: "TPOT"
    title: str  # the terminal report's heading
    sample: str  # one sample per what
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


CATALOGUE: tuple[Metric, ...] = (
    Metric(
        "tpot",
        "TPOT",
        "TPOT: gap of every output token after the first, token-weighted",
        "output token after the first",
        per_token=True,
        phased=True,
        causes=True,
        stall_tagged=True,
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
    ),
    Metric(
        "itl",
        "ITL",
        "ITL: gap between consecutive token events (inter-chunk latency)",
        "token event after the first",
        per_token=True,
        phased=True,
        causes=True,
        stall_tagged=True,
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
    ),
    Metric(
        "request_tpot",
        "Request TPOT",
        "Request TPOT: (last - first event) / (tokens after the first event)",
        "request with a token after its first event",
        stall_tagged=True,
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
    ),
    Metric(
        "ttft",
        "TTFT",
        "TTFT: send -> first token event",
        "request",
        stall_tagged=True,
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
    ),
    Metric(
        "ttfat",
        "TTFAT",
        "TTFAT: send -> first answer token event (after the reasoning)",
        "request with an answer token",
        gateable=True,
        in_table=True,
        peers={"AIPerf": "time_to_first_output_token (reasoning models)"},
    ),
    Metric(
        "e2e",
        "E2E",
        "E2E: send -> last token event",
        "request",
        stall_tagged=True,
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
    ),
    Metric(
        "worst_gap",
        "Worst gap",
        "Worst gap: largest ITL of each request",
        "request with two token events or more",
        stall_tagged=True,
        gateable=True,
        goodput=True,
        in_table=True,
        in_tab=True,
    ),
    Metric(
        "stall_time",
        "Stall time",
        "Stall time: per request, the time the reader waited beyond the pace's deadlines",
        "request, with slo.pace",
        gateable=True,
        in_table=True,
        peers={"Etalon": "fluidity-index's missed deadlines, as time"},
    ),
    Metric(
        "ttft_from_intended",
        "TTFT from intended",
        "TTFT from intended: open-loop arrival time -> first token event",
        "first request of an open-loop session",
        gateable=True,
    ),
    Metric(
        "schedule_lag",
        "Schedule lag",
        "Schedule lag: open-loop arrival time -> send (client queueing)",
        "first request of an open-loop session",
        gateable=True,
    ),
    Metric(
        "read_delay",
        "Read delay",
        "Read delay: kernel receipt of a read's bytes -> this client reading them",
        "socket read (kernel stamps only)",
        in_tab=True,
        in_timeseries=True,
    ),
)
BY_NAME: dict[str, Metric] = {metric.name: metric for metric in CATALOGUE}


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
