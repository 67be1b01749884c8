"""The run's merged token metrics as Prometheus text, for the dashboards cluster users have.

Made from the master's (or a single process's) merged totals after each report interval,
so every scrape sees one consistent snapshot, never totals half added. What each family
holds (docs/distributed.md, "Live metrics"):

- ``tpot_locust_<metric>_seconds``: a histogram per exported metric and user class (and
  per model, where a class split its traffic over models: ``SCOPE_LABELS``); its
  buckets read from the merged HDR histogram (``bucket_counts``), its ``_sum`` from the
  HDR buckets' midpoints;
- ``tpot_locust_<metric>_quantile_seconds{quantile}``: the run's percentiles so far, from
  the same merged histograms (what the report prints, never averages of percentiles);
- counters of requests by outcome, errors by category, output tokens and client stalls;
  gauges of the last interval's tokens/s, the users, whether a test runs and lost workers.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import Collector

from tpot_locust.common import metric_catalogue as catalogue
from tpot_locust.common.metric_catalogue import ALL_CLASSES
from tpot_locust.common.percentiles import PERCENTILES
from tpot_locust.metrics.histograms import counts_indexes, counts_view, histogram_stats
from tpot_locust.metrics.metric_set import ClassMetrics, MetricSet

PREFIX = "tpot_locust"
EXPORTED_METRICS = catalogue.names("exported")
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# Upper bounds in seconds: fine where a per-token tail lives (0.5 ms steps to 4 ms, 1 ms
# steps to 20 ms), coarser for a first token and a whole request.
_TOKEN_BUCKETS_S = (
    *(round(0.0005 * i, 4) for i in range(1, 9)),
    *(0.001 * i for i in range(5, 21)),
    0.025,
    0.03,
    0.04,
    0.05,
    0.075,
    0.1,
    0.15,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
)
_FIRST_TOKEN_BUCKETS_S = (
    0.005,
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.3,
    0.5,
    0.75,
    1.0,
    1.5,
    2.0,
    3.0,
    5.0,
    7.5,
    10.0,
    20.0,
    30.0,
    60.0,
    120.0,
)
_REQUEST_BUCKETS_S = (
    0.1,
    0.25,
    0.5,
    1.0,
    2.0,
    3.0,
    5.0,
    7.5,
    10.0,
    15.0,
    20.0,
    30.0,
    45.0,
    60.0,
    90.0,
    120.0,
    180.0,
    300.0,
    600.0,
    1800.0,
)


def buckets_s(metric: str) -> tuple[float, ...]:
    """A metric's bucket bounds: per-token gaps fine, first tokens and requests coarser."""
    if catalogue.BY_NAME[metric].per_token:
        return _TOKEN_BUCKETS_S
    return _FIRST_TOKEN_BUCKETS_S if metric.startswith("ttf") else _REQUEST_BUCKETS_S


@dataclass
class LiveFacts:
    """What the page says beside the histograms: the load and the workers, now."""

    running: bool = False
    users: int = 0
    tokens_per_s: float | None = None  # the last whole interval's
    workers_missing: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


def bucket_counts(histogram: object, bounds_s: tuple[float, ...]) -> list[int]:
    """Cumulative counts of the samples at or below each bound: every HDR bucket up to the
    one holding the bound (exact below 2.048 ms, where a bucket is 1 us wide; above, a
    sample up to 0.1 % over a bound may count in it, as a percentile reads the bucket's
    highest value)."""
    cumulative = np.cumsum(counts_view(histogram), dtype=np.int64)
    bounds_us = np.array([round(bound * 1e6) for bound in bounds_s], dtype=np.int64)
    indexes = np.minimum(counts_indexes(bounds_us), cumulative.size - 1)
    return [int(cumulative[index]) for index in indexes]


class _Snapshot(Collector):
    """The families of one snapshot, for ``generate_latest``."""

    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterator[Metric]:
        return iter(self.families)


# A scope's labels: (user_class, model). A class, or all traffic, has no model; a model
# (``classes.<name>.model``, across the classes that name it) has no user_class. An empty
# value is no label to Prometheus, so ``{user_class="all"}`` never adds a model's series in.
SCOPE_LABELS = ["user_class", "model"]
Scope = tuple[tuple[str, str], ClassMetrics]


def render(totals: MetricSet, facts: LiveFacts) -> bytes:
    """The Prometheus text exposition of ``totals`` and ``facts``."""
    scopes: list[Scope] = [
        ((name, ""), metrics) for name, metrics in sorted(totals.by_class().items())
    ]
    scopes.append(((ALL_CLASSES, ""), totals.combined()))  # always: a dashboard's default view
    scopes += [(("", name), metrics) for name, metrics in sorted(totals.by_model().items())]
    families = [*_histograms(scopes), *_counters(scopes, totals), *_gauges(facts)]
    return generate_latest(_Snapshot(families))


def _histograms(scopes: list[Scope]) -> Iterable[Metric]:
    for name in EXPORTED_METRICS:
        entry = catalogue.BY_NAME[name]
        bounds = buckets_s(name)
        family = HistogramMetricFamily(
            f"{PREFIX}_{name}_seconds", f"{entry.title} (docs/metrics.md)", labels=SCOPE_LABELS
        )
        quantiles = GaugeMetricFamily(
            f"{PREFIX}_{name}_quantile_seconds",
            f"{entry.short}: the run's percentiles so far (1: the max), merged HDR histograms",
            labels=[*SCOPE_LABELS, "quantile"],
        )
        for labels, metrics in scopes:
            histogram = metrics.read(name)
            stats = histogram_stats(histogram)
            cumulative = bucket_counts(histogram, bounds)
            pairs = zip(bounds, cumulative, strict=True)
            buckets = [(f"{bound:g}", count) for bound, count in pairs]
            buckets.append(("+Inf", stats.count))
            family.add_metric(labels, buckets, sum_value=stats.mean * stats.count / 1e6)
            if stats.count:  # quantile 1 is the max, as the report's last row
                for percentile in PERCENTILES:
                    value_s = stats.percentiles[percentile] / 1e6
                    quantiles.add_metric([*labels, f"{percentile / 100:g}"], value_s)
                quantiles.add_metric([*labels, "1"], stats.max / 1e6)
        yield family
        yield quantiles


def _counters(scopes: list[Scope], totals: MetricSet) -> Iterable[Metric]:
    requests = CounterMetricFamily(
        f"{PREFIX}_requests", "requests ended, by outcome", labels=[*SCOPE_LABELS, "outcome"]
    )
    errors = CounterMetricFamily(
        f"{PREFIX}_request_errors",
        "failed requests, by category",
        labels=[*SCOPE_LABELS, "category"],
    )
    tokens = CounterMetricFamily(
        f"{PREFIX}_output_tokens", "output tokens of ended requests", labels=SCOPE_LABELS
    )
    arrived = CounterMetricFamily(
        f"{PREFIX}_arrived_tokens",
        "tokens of the token events that arrived, as they arrived",
        labels=SCOPE_LABELS,
    )
    for labels, metrics in scopes:
        counters = metrics.counters
        for outcome, count in (
            ("ok", counters.ok),
            ("failed", counters.failed),
            ("interrupted", counters.interrupted),
        ):
            requests.add_metric([*labels, outcome], count)
        for category, count in sorted(counters.errors.items()):
            errors.add_metric([*labels, category], count)
        tokens.add_metric(labels, counters.output_tokens)
        arrived.add_metric(labels, counters.arrived_tokens)
    stalls = CounterMetricFamily(
        f"{PREFIX}_client_stalls", "windows when a load process's event loop could not run"
    )
    stalls.add_metric([], totals.client.stalls)
    stalled = CounterMetricFamily(
        f"{PREFIX}_client_stalled_seconds", "the time those windows lasted"
    )
    stalled.add_metric([], totals.client.stalled_ns / 1e9)
    watched = CounterMetricFamily(
        f"{PREFIX}_client_watched_seconds",
        "the time the load processes' loops were watched for stalls: "
        "stalled over watched is the held share",
    )
    watched.add_metric([], totals.client.watched_ns / 1e9)
    cpu = CounterMetricFamily(
        f"{PREFIX}_client_cpu_seconds",
        "the CPU time the load processes spent while watched: over arrived tokens, the "
        "client's CPU a token",
    )
    cpu.add_metric([], totals.client.cpu_ns / 1e9)
    return [requests, errors, tokens, arrived, stalls, stalled, watched, cpu]


def _gauges(facts: LiveFacts) -> Iterable[Metric]:
    yield GaugeMetricFamily(f"{PREFIX}_running", "1 while a test runs", value=int(facts.running))
    yield GaugeMetricFamily(f"{PREFIX}_users", "users running now", value=facts.users)
    yield GaugeMetricFamily(
        f"{PREFIX}_workers_missing", "workers lost during the test", value=facts.workers_missing
    )
    if facts.tokens_per_s is not None:
        yield GaugeMetricFamily(
            f"{PREFIX}_tokens_per_second",
            "output tokens per second over the last interval",
            value=facts.tokens_per_s,
        )
