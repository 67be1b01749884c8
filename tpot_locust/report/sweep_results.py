"""A sweep's results: one row per step, the knee, as a table, ``sweep.json`` and a page.

The *knee* is the highest step that met every SLO while every step below it did too: the
most load this server carries within the scenario's objectives, to the sweep's resolution.
The *sure knee* is the highest step, from the first, where every gated latency figure's 95 %
interval (metrics.md, "How sure is each number") lies below its limit: past it, another run
of the same step could break an SLO that this one met.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tpot_locust.common.metric_catalogue import TPOT, TTFT
from tpot_locust.common.results_files import write_file
from tpot_locust.common.results_folder import ResultsFolder
from tpot_locust.common.text_safety import printable
from tpot_locust.report.charts import CHART_CSS, Curve, escape, load_chart
from tpot_locust.report.html import PAGE_CSS
from tpot_locust.report.saved_results import STEP_SUMMARY, read_checked
from tpot_locust.report.summary_types import Summary, Verdict

SWEEP_FILE = "sweep.json"
SWEEP_HTML = "sweep.html"
STEP_FIGURES = ((TTFT.name, "p50"), (TTFT.name, "p99"), (TPOT.name, "p50"), (TPOT.name, "p99"))


def step_row(step: int, value: float, folder: Path, exit_code: int) -> dict[str, Any]:
    """One step as the sweep reports it, read from its run's summary.json."""
    row: dict[str, Any] = {"step": step, "value": value, "dir": folder.name, "exit_code": exit_code}
    summary_path = ResultsFolder(folder).summary
    if not summary_path.exists():
        return row | {"verdict": "invalid", "why": "the run wrote no summary"}
    try:
        summary: Summary = read_checked(summary_path, STEP_SUMMARY)
    except ValueError as error:  # a damaged summary is that step's result, not a crash
        return row | {"verdict": "invalid", "why": str(error)}
    verdict: Verdict | dict[str, Any] = summary.get("slo") or {}
    row["verdict"] = verdict.get("verdict", "none")
    row["failed"] = [c["name"] for c in verdict.get("checks", []) if c["verdict"] == "fail"]
    row["run_invalid"] = verdict.get("run_invalid", [])
    row["requests_ok"] = summary["requests"]["ok"]
    row["requests_failed"] = summary["requests"]["failed"]
    row["tokens_per_s"] = summary["tokens"]["per_s"]
    goodput = summary.get("goodput")
    row["goodput_per_s"] = goodput.get("per_s") if goodput else None
    for metric, statistic in STEP_FIGURES:
        value_ms = summary["metrics"].get(metric, {}).get(statistic)
        row.setdefault(metric, {})[statistic] = value_ms
    for metric in {metric for metric, _ in STEP_FIGURES}:
        intervals = summary["metrics"].get(metric, {}).get("ci95")
        if intervals is not None:
            row[metric]["ci95"] = intervals
    return row


def sure_knee(
    rows: list[dict[str, object]], limits: list[dict[str, object]]
) -> dict[str, object] | None:
    """The last step, from the first, that passed with every gated latency figure's interval
    wholly below its limit (a figure with no interval, a tail not measured: not sure)."""
    best = None
    for row in rows:
        if row.get("verdict") != "pass" or not all(_surely_below(row, o) for o in limits):
            break
        best = row
    return None if best is None else {"step": best["step"], "value": best["value"]}


def _surely_below(row: dict[str, Any], objective: dict[str, Any]) -> bool:
    bounds = ((row.get(objective["metric"]) or {}).get("ci95") or {}).get(objective["statistic"])
    return bounds is not None and bounds[1] <= objective["limit"]


def knee(rows: list[dict[str, object]]) -> dict[str, object] | None:
    """The last step of the passing run from the first: None when the first failed."""
    best = None
    for row in rows:
        if row.get("verdict") != "pass":
            break
        best = row
    return None if best is None else {"step": best["step"], "value": best["value"]}


def write_sweep(out: Path, document: dict[str, object]) -> None:
    write_file(out / SWEEP_FILE, json.dumps(document, indent=2) + "\n")
    write_file(out / SWEEP_HTML, render_sweep(document))


def format_sweep(document: dict[str, Any]) -> list[str]:
    vary = printable(document["vary"])
    header = (
        f"  {'step':>4} {vary:>9} {'verdict':>12} {'tokens/s':>10} {'goodput/s':>10}"
        f" {'TTFT p50':>9} {'p99':>9} {'TPOT p50':>9} {'p99':>9}"
    )
    lines = [
        f"Sweep of {printable(document['class'])}.{vary} ({printable(document['scenario'])}), ms:",
        header,
    ]
    for row in document["steps"]:
        goodput = row.get("goodput_per_s")
        figures = "".join(f" {_ms((row.get(m) or {}).get(s)):>9}" for m, s in STEP_FIGURES)
        lines.append(
            f"  {row['step']:>4} {row['value']:>9g} {row.get('verdict', '-'):>12} "
            f"{row.get('tokens_per_s', 0):>10,.1f} "
            f"{'-' if goodput is None else f'{goodput:,.2f}':>10}{figures}"
        )
    point = document["knee"]
    if point is None:
        lines.append("knee: none (the first step already broke an SLO)")
    else:
        lines.append(
            f"knee: {vary} {point['value']:g} (step {point['step']}), the highest "
            "step that met every SLO"
        )
    if "sure_knee" in document and point is not None:
        sure = document["sure_knee"]
        lines.append(
            "sure knee: none (the first step's intervals already reach a limit)"
            if sure is None
            else f"sure knee: {vary} {sure['value']:g} (step {sure['step']}), the highest "
            "whose every gated latency figure's 95% interval lies below its limit"
        )
    if why := document.get("stopped_because"):
        lines.append(f"stopped: {printable(why)}")
    return lines


def render_sweep(document: dict[str, Any]) -> str:
    rows = [row for row in document["steps"] if row.get(TPOT.name)]
    charts = []
    for metric in (TPOT.name, TTFT.name):
        curves = [
            Curve(
                f"{metric.upper()} {statistic}",
                [
                    (row["value"], row[metric][statistic])
                    for row in rows
                    if row[metric].get(statistic) is not None
                ],
            )
            for statistic in ("p50", "p99")
        ]
        limits = [(f"SLO {name}", limit) for name, limit in _limits(document, metric)]
        charts.append(
            load_chart(
                f"{metric.upper()} by {document['vary']}", curves, "ms", document["knee"], limits
            )
        )
    throughput = [Curve("tokens/s", [(row["value"], row["tokens_per_s"]) for row in rows])]
    charts.append(
        load_chart(f"tokens/s by {document['vary']}", throughput, "tokens/s", document["knee"])
    )
    title = f"tpot-locust sweep: {document['scenario']}"
    table = "\n".join(escape(line) for line in format_sweep(document))
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f"<title>{escape(title)}</title><style>{PAGE_CSS}{CHART_CSS}</style></head><body>"
        f"<h1>{escape(title)}</h1><pre>{table}</pre>" + "".join(charts) + "</body></html>\n"
    )


def _limits(document: dict[str, Any], metric: str) -> list[tuple[str, float]]:
    """The SLO limits (ms) on ``metric``'s p50 or p99 the sweep's knee was found against."""
    found = []
    for slo in document.get("slo_limits_ms") or []:
        if slo.get("metric") == metric and slo.get("statistic") in ("p50", "p99"):
            found.append((f"{metric} {slo['statistic']} <= {slo['limit']:g} ms", slo["limit"]))
    return found


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"
