"""The web UI's charts page: the master's merged histograms and time series, drawn live.

The page is the same SVG as ``report.html`` (``charts``), rendered on the master; a few
lines of inline script fetch the next rendering from the same server every 2 s. Nothing
comes from anywhere else, so it works offline and behind ``--web-base-path``. Under the
time series, the tail's timeline (``tail_pictures``): the largest gaps so far, the prompt
tokens in prefill and, when the server's metrics are sampled, its running and waiting
requests, KV usage and preemptions, on one time axis.
"""

from __future__ import annotations

import json

from tpot_locust.common.metric_catalogue import E2E, ITL, TPOT, TTFT
from tpot_locust.common.percentiles import PERCENTILE_KEYS, Statistic
from tpot_locust.metrics.metric_set import MetricSet
from tpot_locust.report.charts import CHART_CSS, percentile_chart
from tpot_locust.report.html import (
    DISTRIBUTION_METRICS,
    NAMES,
    PAGE_CSS,
    RunView,
    distribution_curves,
    timeseries_charts,
)
from tpot_locust.report.summary_types import Summary
from tpot_locust.report.tail_pictures import tail_timeline

REFRESH_MS = 2000
# A dashboard: the headline table on top, then the charts two a row on a wide screen (one on
# a narrow one), none narrower than 560 px (a chart is drawn 720 px wide: its 13 px text is
# ~10 px there; 11 px text at 440 px read as ~7); the tail's timeline keeps one column.
DASHBOARD_CSS = """
body.dashboard { max-width: 1600px; }
body.dashboard .charts { display: grid; gap: 12px;
  grid-template-columns: repeat(auto-fill, minmax(560px, 1fr)); }
body.dashboard .charts svg.chart { max-width: none; }
"""
LIVE_STATISTICS: tuple[Statistic, ...] = (*PERCENTILE_KEYS, "max")


def charts_fragment(summary: Summary, totals: MetricSet, running: bool) -> str:
    """The live part: a table of the headline figures and every chart."""
    rows = []
    for name in (TPOT.name, ITL.name, TTFT.name, E2E.name):
        figures = summary["metrics"][name]
        cells = "".join(
            f'<td data-metric="{name}" data-stat="{stat}">{figures[stat]:.3f}</td>'
            for stat in LIVE_STATISTICS
        )
        rows.append(f"<tr><td>{NAMES[name]}</td><td>{figures['count']:,}</td>{cells}</tr>")
    head = "".join(f"<th>{stat}</th>" for stat in LIVE_STATISTICS)
    state = "running" if running else "stopped"
    table = (
        f'<p class="note">Test {state}; merged totals of every worker, up to one report '
        f"interval old (ms).</p><table><tr><th>metric</th><th>count</th>{head}</tr>"
        + "".join(rows)
        + "</table>"
    )
    run = RunView("live", summary, totals)
    distributions = [
        percentile_chart(f"{NAMES[name]} by percentile", distribution_curves([run], name))
        for name in DISTRIBUTION_METRICS
    ]
    return (
        table + '<div class="charts">' + "".join(distributions) + "</div>"
        '<div class="charts">' + "".join(timeseries_charts(summary)) + "</div>"
        '<div class="timeline" id="tail-timeline">' + "".join(tail_timeline(summary)) + "</div>"
    )


def charts_page(fragment_url: str, fragment: str) -> str:
    script = f"""
const url = {json.dumps(fragment_url)};
async function refresh() {{
  try {{
    const response = await fetch(url, {{credentials: "same-origin"}});
    if (response.ok) document.getElementById("live").innerHTML = await response.text();
  }} catch (error) {{ /* the master stopped: keep the last picture */ }}
}}
setInterval(refresh, {REFRESH_MS});
"""
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        '<link rel="icon" href="data:,">'  # no favicon request
        f"<title>tpot-locust charts</title><style>{PAGE_CSS}{CHART_CSS}{DASHBOARD_CSS}</style>"
        '</head><body class="dashboard">'
        f'<h1>tpot-locust: live charts</h1><div id="live">{fragment}</div>'
        f"<script>{script}</script></body></html>"
    )
