"""The release gate: a run's summary held to its scenario's SLOs, one verdict per objective.

Each objective ends ``pass``, ``fail``, ``insufficient`` (too few samples above the
percentile to know it) or ``invalid`` (the measurement cannot be trusted there: samples
above it overlap client stalls). The run as a whole is invalid when a worker was lost or
its self-check against the simulator's truth failed. Exit codes: 0 pass, 1 fail, 3 invalid
(2 stays the scenario's and the command line's).

Pure functions of the summary: the Locust process gates at the end of its run, and
``tpot-locust run`` gates again once the truth check is in the summary.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

from tpot_locust.common import metric_catalogue as catalogue
from tpot_locust.common.metric_catalogue import ALL_CLASSES
from tpot_locust.common.percentiles import is_statistic
from tpot_locust.report.compare import Comparison, compare_summaries
from tpot_locust.report.summary_types import (
    CheckRecord,
    Mark,
    MetricFigures,
    StallFigures,
    Summary,
    Verdict,
)
from tpot_locust.report.window_figures import burst_problem
from tpot_locust.scenario.slo import Objective, SloSpec, format_limit
from tpot_locust.scenario.slo_values import format_value

PASS: Final = "pass"
FAIL: Final = "fail"
INSUFFICIENT: Final = "insufficient"
INVALID: Final = "invalid"
EXIT_PASS, EXIT_FAIL, EXIT_INVALID = 0, 1, 3
# Metrics whose samples the recorder tags when they overlap a client stall.
_TAGGED = catalogue.names("stall_tagged")
# What a rate objective counts, for people: "7,663.6 tokens/s", never a bare "7663.6".
_RATE_UNITS = {
    "tokens_per_s": "tokens/s",
    "requests_per_s": "requests/s",
    "goodput_per_s": "good requests/s",
}


def format_measured(value: float, unit: str, metric: str) -> str:
    """A measured figure or a limit with its unit, as every verdict shows it (the terminal,
    junit.xml, summary.md, report.html): a rate with thousands separators and what it
    counts, the rest as the scenario's own values read (``slo_values.format_value``)."""
    if unit == "per_s":
        return f"{value:,.1f} {_RATE_UNITS.get(metric, 'per s')}".replace(".0 ", " ")
    return format_value(value, unit)


@dataclass
class Check:
    """One objective's verdict, as written to ``verdict.json``."""

    name: str
    kind: str
    metric: str
    class_name: str | None
    statistic: str | None
    limit: float
    unit: str
    measured: float | None
    samples_above: int | None
    verdict: Mark
    why: str
    model: str | None = None

    def to_dict(self) -> CheckRecord:
        return {
            "name": self.name,
            "kind": self.kind,
            "metric": self.metric,
            "class": self.class_name,
            "model": self.model,
            "statistic": self.statistic,
            "limit": self.limit,
            "unit": self.unit,
            "measured": self.measured,
            "samples_above": self.samples_above,
            "verdict": self.verdict,
            "why": self.why,
        }


def evaluate(spec: SloSpec, summary: Summary, baseline: Summary | None = None) -> Verdict:
    """The verdict of a run: ``{"verdict", "exit_code", "checks": [...], "run_invalid": [...],
    "warnings": [...]}``. ``baseline``: the summary of ``spec.baseline``'s run, when set."""
    checks = [_check(objective, spec, summary) for objective in spec.objectives]
    extra_warnings: list[str] = []
    if spec.baseline is not None:
        checks += _baseline_checks(spec, summary, baseline)
    run_invalid = run_validity(summary)
    if problem := burst_problem(summary):  # invalid where a gate stands on the bursts
        gated = any(objective.kind == "interference" for objective in spec.objectives)
        (run_invalid if gated else extra_warnings).append(problem)
    warnings = extra_warnings + [
        f"{check.name}: {check.why} (insufficient: warn)"
        for check in checks
        if check.verdict == INSUFFICIENT and spec.insufficient == "warn"
    ]
    verdicts = {check.verdict for check in checks}
    verdict: Mark
    if run_invalid or INVALID in verdicts:
        verdict, code = INVALID, EXIT_INVALID
    elif FAIL in verdicts or (INSUFFICIENT in verdicts and spec.insufficient == "fail"):
        verdict, code = FAIL, EXIT_FAIL
    else:
        verdict, code = PASS, EXIT_PASS
    return {
        "verdict": verdict,
        "exit_code": code,
        "checks": [check.to_dict() for check in checks],
        "run_invalid": run_invalid,
        "warnings": warnings,
        "insufficient_policy": spec.insufficient,
        "client_stalls_policy": spec.client_stalls,
    }


def unmeasured(spec: SloSpec, reason: str) -> Verdict:
    """The verdict of a run that could not start (a host nothing listens on): invalid."""
    return {
        "verdict": INVALID,
        "exit_code": EXIT_INVALID,
        "checks": [],
        "run_invalid": [reason],
        "warnings": [],
        "insufficient_policy": spec.insufficient,
        "client_stalls_policy": spec.client_stalls,
    }


def run_validity(summary: Summary) -> list[str]:
    """Why the run as a whole is not a valid measurement (empty: it is)."""
    reasons = []
    workers = summary.get("workers")
    missing = ", ".join(workers.get("missing", []) if workers else [])
    if report_error := summary.get("report_error"):
        reasons.append(f"the report could not be built in full: {report_error}")
    if not summary.get("complete", True) and (missing or not report_error):
        reasons.append(f"worker(s) lost before their final report: {missing or 'unknown'}")
    truth = summary.get("truth_check")
    if truth and truth.get("passed") is False:
        reasons.append(
            f"the self-check against the simulator's truth failed (worst error "
            f"{truth.get('worst_error_ms')} ms, tolerance {truth.get('tolerance_ms')} ms)"
        )
    schedule = truth.get("schedule") if truth else None
    if schedule and schedule.get("client_held"):
        reasons.append(
            f"the client held the server's sending: only "
            f"{schedule.get('sent_at_once_share') or 0:.1%} of the simulator's token writes "
            "left when written (its TCP acknowledgements came late)"
        )
    requests = summary.get("requests", {})
    gaps = (summary.get("window") or {}).get("gaps")
    if not requests.get("ok") and not requests.get("failed") and not gaps:
        reasons.append("no request finished and no token gap arrived: nothing was measured")
    return reasons


def _scope(summary: Summary, objective: Objective) -> Summary | None:
    """The figures an objective holds: its class's, its model's, or the whole run's."""
    if objective.class_name is not None:
        return summary.get("classes", {}).get(objective.class_name)
    if objective.model is not None:
        return summary.get("models", {}).get(objective.model)
    return summary


def _check(objective: Objective, spec: SloSpec, summary: Summary) -> Check:
    scope = _scope(summary, objective)
    if scope is None:
        why = (
            "the class sent no request"
            if objective.class_name is not None
            else f"no request went to model {objective.model}"
        )
        return _result(objective, None, None, INSUFFICIENT, why)
    if objective.kind == "latency":
        return _latency(objective, spec, scope)
    if objective.kind == "error_rate":
        requests = scope["requests"]
        total = requests["ok"] + requests["failed"]
        if not total:
            return _result(objective, None, None, INSUFFICIENT, "no request finished")
        return _bounded(objective, requests["failed"] / total, None)
    if objective.kind == "throughput":
        rates = scope["tokens"] if objective.metric == "tokens_per_s" else scope["requests"]
        measured = rates["per_s"]
        return _bounded(objective, measured, None)
    if objective.kind == "goodput":
        goodput = scope.get("goodput")
        if goodput is None:
            return _result(objective, None, None, INSUFFICIENT, "no goodput was counted")
        value = goodput["fraction"] if objective.metric == "good_fraction" else goodput["per_s"]
        if value is None:
            return _result(objective, None, None, INSUFFICIENT, "no request finished")
        return _bounded(objective, value, None)
    if objective.kind == "fluidity":
        fluidity = scope.get("fluidity")
        if not fluidity or fluidity["on_time_fraction"] is None:
            return _result(objective, None, None, INSUFFICIENT, "no token was held to the pace")
        return _bounded(objective, fluidity["on_time_fraction"], None)
    return _interference(objective, scope)


def _latency(objective: Objective, spec: SloSpec, scope: Summary) -> Check:
    metric = scope["metrics"][objective.metric]
    statistic = str(objective.statistic)
    if not is_statistic(statistic):  # the scenario's SLO allows no other
        raise ValueError(f"unknown statistic {statistic!r}")
    if not metric["count"]:
        return _result(objective, None, 0, INSUFFICIENT, "no samples")
    measured = metric[statistic]
    above = metric["above"].get(statistic) if statistic.startswith("p") else None
    if above is not None and above < objective.min_samples_above:
        why = (
            f"{above:,} sample{'s' * (above != 1)} above {statistic} (needs "
            f"{objective.min_samples_above:,}): "
            f"{_longer(metric, statistic, objective.min_samples_above, scope)}"
        )
        return _result(objective, measured, above, INSUFFICIENT, why)
    stalls = metric.get("client_stall") or {}
    tagged = _tagged_above(stalls, statistic) if objective.metric in _TAGGED else 0
    if tagged and statistic != "mean":  # none is tagged above the mean
        clean = stalls["set_aside"][statistic]
        outcome, clean_outcome = measured <= objective.limit, clean <= objective.limit
        if spec.client_stalls == "invalid" or outcome != clean_outcome:
            why = (
                f"{tagged:,} of the {above if above is not None else 'top'} samples above "
                f"{statistic} overlap client stalls (stall-free {clean:g} ms): the load "
                "generator, not the server, may have made this figure"
            )
            return _result(objective, measured, above, INVALID, why)
    return _bounded(objective, measured, above)


def _tagged_above(stalls: StallFigures, statistic: str) -> int:
    if not stalls.get("count"):
        return 0
    if statistic == "max":
        return 1 if stalls.get("max", 0) >= stalls["set_aside"]["max"] else 0
    if statistic == "mean":
        return 0
    return int(stalls["above"].get(statistic, 0))


def _longer(metric: MetricFigures, statistic: str, needed: int, scope: Summary) -> str:
    """How much longer to run for ``needed`` samples above the percentile, at this rate."""
    fraction_above = 1 - float(statistic[1:]) / 100
    total_needed = math.ceil(needed / fraction_above)
    window_s = scope.get("window_s") or 0
    if not window_s or not metric["count"]:
        return f"about {total_needed:,} samples in all are needed"
    seconds = (total_needed - metric["count"]) * window_s / metric["count"]
    return f"run about {max(seconds, 1):,.0f} s longer ({total_needed:,} samples in all)"


def _interference(objective: Objective, scope: Summary) -> Check:
    interference = scope.get("interference")
    if not interference:
        return _result(objective, None, None, INSUFFICIENT, "no token gap fell in a burst")
    factors, statistic = interference["interference_factor"][objective.metric], objective.statistic
    factor = None if statistic is None else factors.get(statistic)
    if factor is None:
        return _result(objective, None, None, INSUFFICIENT, "no steady-phase samples")
    return _bounded(objective, factor, None)


def _bounded(objective: Objective, measured: float, above: int | None) -> Check:
    ok = measured <= objective.limit if objective.upper else measured >= objective.limit
    shown = format_measured(measured, objective.unit, objective.metric)
    limit = (
        format_measured(objective.limit, objective.unit, objective.metric)
        if objective.unit == "per_s"
        else format_limit(objective)
    )
    relation = ("<=" if ok else ">") if objective.upper else (">=" if ok else "<")
    why = f"measured {shown} {relation} limit {limit}"
    return _result(objective, measured, above, PASS if ok else FAIL, why)


def _result(
    objective: Objective, measured: float | None, above: int | None, verdict: Mark, why: str
) -> Check:
    return Check(
        name=objective.name,
        kind=objective.kind,
        metric=objective.metric,
        class_name=objective.class_name,
        statistic=objective.statistic,
        limit=objective.limit,
        unit=objective.unit,
        measured=measured,
        samples_above=above,
        verdict=verdict,
        why=why,
        model=objective.model,
    )


def _baseline_checks(spec: SloSpec, summary: Summary, baseline: Summary | None) -> list[Check]:
    assert spec.baseline is not None
    rule = spec.baseline
    name = f"no regression > {rule.max_regression * 100:g}% against {rule.results}"
    if baseline is None:
        return [
            Check(
                name,
                "baseline",
                "baseline",
                None,
                None,
                rule.max_regression,
                "fraction",
                None,
                None,
                INVALID,
                f"no saved run in {rule.results}",
            )
        ]
    comparison = compare_summaries(
        baseline, summary, rule.metrics, rule.percentiles, rule.max_regression
    )
    return [_compared(row, rule.max_regression) for row in comparison.rows]


def _compared(row: Comparison, threshold: float) -> Check:
    name = f"{row.scope}: {row.metric} {row.statistic} within +{threshold * 100:g}% of baseline"
    verdict: Mark
    if row.too_few:
        verdict, why = INSUFFICIENT, f"too few samples above {row.statistic} to compare"
    elif row.verdict == "inconclusive":
        interval = f" ({row.ci95[0]:+.1%} .. {row.ci95[1]:+.1%})" if row.ci95 else ""
        verdict = INSUFFICIENT
        why = f"{row.base:g} -> {row.candidate:g} ms ({row.change_text}{interval}): inconclusive"
    elif row.regressed:
        verdict, why = FAIL, f"{row.base:g} -> {row.candidate:g} ms ({row.change_text})"
    else:
        verdict, why = PASS, f"{row.base:g} -> {row.candidate:g} ms ({row.change_text})"
    scope = None if row.scope == ALL_CLASSES else row.scope
    return Check(
        name,
        "baseline",
        row.metric,
        scope,
        row.statistic,
        threshold,
        "fraction",
        row.change,
        row.candidate_above,
        verdict,
        why,
    )
