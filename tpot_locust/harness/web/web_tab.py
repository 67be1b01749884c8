"""The TPOT tab's table: per class (all merged, each class, each model) and metric, its
figures and, below them, each percentile's 95 % interval so far.

Why its own room: the rows are read from the totals and the catalogue, the same whatever
serves them; ``webui`` only hands them to Locust's ``/stats/requests`` JSON, whose
``extended_stats`` fill the tab (``COLUMNS``, under ``TAB_KEY``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tpot_locust.common import metric_catalogue as catalogue
from tpot_locust.common.cooperation import let_streams_run
from tpot_locust.common.metric_catalogue import TPOT
from tpot_locust.metrics.histograms import histogram_stats
from tpot_locust.metrics.intervals import PercentileInterval
from tpot_locust.metrics.metric_set import ClassMetrics

if TYPE_CHECKING:
    from tpot_locust.harness.run.run_state import RunState

TAB_KEY = TPOT.name  # the tab is named after its headline metric
TAB_METRICS = catalogue.names("in_tab")
PER_TOKEN = catalogue.names("per_token")
COLUMNS = (
    ("name", "Class"),
    ("metric", "Metric"),
    ("count", "Samples"),
    ("mean", "Mean ms"),
    ("p50", "Median ms"),
    ("p90", "P90 ms"),
    ("p99", "P99 ms"),
    ("p99.9", "P99.9 ms"),
    ("p99.99", "P99.99 ms"),
    ("max", "Max ms"),
    ("tokens_per_s", "Tokens/s at median"),
)
NO_SECTIONS = "\0model"  # no class is named so: a model's row has no live sections


def tab_rows(state: RunState) -> list[dict[str, Any]]:
    """The tab's rows: per scope and metric its figures and, below them, each percentile's
    95 % interval so far (``metrics.live_sections``)."""
    rows: list[dict[str, Any]] = []
    totals = state.collector.totals
    classes, models = totals.by_class(), totals.by_model()
    # each row's label, figures and the live sections' scope (None: every class merged;
    # NO_SECTIONS: none kept, a model's)
    scopes: list[tuple[str, ClassMetrics, str | None]] = []
    if len(classes) > 1 or models:
        scopes.append(("All", totals.combined(), None))
    scopes += [(name, metrics, name) for name, metrics in sorted(classes.items())]
    scopes += [(f"model {name}", m, NO_SECTIONS) for name, m in sorted(models.items())]
    sections = state.collector.sections
    for scope, metrics, kept in scopes:
        with_intervals = kept != NO_SECTIONS
        for name in TAB_METRICS:
            histogram = metrics.histograms.get(name)
            if histogram is None or not histogram.total_count:
                continue
            stats = histogram_stats(histogram)
            label = catalogue.BY_NAME[name].short  # the terminal's and report.html's names
            # shown as they come: text as the terminal writes it (Locust's table prints a
            # number bare: a mean of 2 beside 1.999, a count of 12422)
            row: dict[str, Any] = {"name": scope, "metric": label, "count": f"{stats.count:,}"}
            row["mean"] = _ms(stats.mean)
            for percentile, value in stats.percentiles.items():
                row[f"p{percentile:g}"] = _ms(value)
            row["max"] = _ms(stats.max)
            median = stats.percentiles[50.0]
            per_token = name in PER_TOKEN and median
            row["tokens_per_s"] = f"{1e6 / median:,.1f}" if per_token else ""
            rows.append(row)
            if with_intervals and name in sections.metrics:
                found = sections.intervals(kept, name, stats.percentiles)
                rows.append(_interval_row(scope, label, found))
                let_streams_run()  # ~5 ms a metric when read anew: the reads go on between
    return rows


def _interval_row(scope: str, label: str, found: dict[float, PercentileInterval]) -> dict[str, Any]:
    """A metric's 95 % intervals, as report.html's row below its figures."""
    row: dict[str, Any] = {"name": scope, "metric": f"{label} 95% interval"}
    row |= dict.fromkeys(("count", "mean", "max", "tokens_per_s"), "")
    for percentile, interval in found.items():
        low, high = interval.low_ms, interval.high_ms
        row[f"p{percentile:g}"] = "not measured" if low is None else f"{low:,.3f}-{high:,.3f}"
    return row


def _ms(microseconds: float) -> str:
    """A figure of the tab: ms to three decimals, every column alike."""
    return f"{microseconds / 1000:,.3f}"
