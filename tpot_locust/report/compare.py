"""Two runs side by side: per class, metric and statistic, base, candidate and the change.

Both come from their saved histograms (``tpot-locust report`` would print the same
figures), so a percentile is compared exactly as measured. A tail with fewer than
``TAIL_MIN_SAMPLES`` samples above it in either run is marked, never gated: its value
moves with a handful of samples.

Where both runs have a percentile's 95 % interval (``ci95``, from their time sections:
``metrics.intervals``), the change is judged with its own interval, not its value alone:
on the log of the ratio, the two half-widths add in quadrature (the delta method), widened
for the number of figures judged together (Bonferroni: a gate of 10 figures must not flap
at 10 x 5 %). ``regressed`` only where the whole interval of the change lies above the
threshold, ``within`` where it lies below it, ``improved`` where it lies below minus the
threshold, ``inconclusive`` where it straddles the threshold (with about how much longer
both runs would need to be to decide).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any, Literal, cast

from tpot_locust.common import metric_catalogue as catalogue
from tpot_locust.common.metric_catalogue import ALL_CLASSES
from tpot_locust.common.percentiles import PERCENTILE_KEYS, STATISTICS, is_statistic
from tpot_locust.common.text_safety import printable
from tpot_locust.metrics.intervals import SECTIONS, t_975, t_quantile
from tpot_locust.report.summary_types import Summary
from tpot_locust.report.truth_check import signed
from tpot_locust.scenario.slo import LATENCY_METRICS, TAIL_MIN_SAMPLES
from tpot_locust.scenario.slo_values import parse_fraction

DEFAULT_METRICS = catalogue.names("in_compare")
DEFAULT_STATISTICS = PERCENTILE_KEYS
FAMILY_ALPHA = 0.05  # the chance that any figure of a whole comparison is flagged by noise
Verdict = Literal["regressed", "within", "improved", "inconclusive", "too few"]


@dataclass
class Comparison:
    scope: str  # "all" or a class name
    metric: str
    statistic: str
    base: float | None
    candidate: float | None
    change: float | None  # (candidate - base) / base
    base_above: int | None
    candidate_above: int | None
    too_few: bool
    regressed: bool
    verdict: Verdict = "within"
    ci95: list[float] | None = None  # the change's interval, as fractions (family-wide)
    longer: float | None = None  # inconclusive: about how many times longer both runs

    @property
    def change_text(self) -> str:
        return "-" if self.change is None else f"{signed(self.change * 100, 1)}%"


@dataclass
class ComparisonResult:
    rows: list[Comparison]
    max_regression: float

    @property
    def regressions(self) -> list[Comparison]:
        return [row for row in self.rows if row.regressed]

    @property
    def exit_code(self) -> int:
        return 1 if self.regressions else 0

    def to_dict(self) -> dict[str, object]:
        return {
            "max_regression": self.max_regression,
            "regressed": bool(self.regressions),
            "rows": [asdict(row) | {"change_text": row.change_text} for row in self.rows],
        }


def parse_choices(
    text: str | None, allowed: tuple[str, ...], default: tuple[str, ...], what: str
) -> tuple[str, ...]:
    """``tpot,ttft`` -> ("tpot", "ttft"); an unknown name is a usage error."""
    if not text:
        return default
    names = tuple(name.strip().lower() for name in text.split(",") if name.strip())
    if not names:  # "--metrics ," gated nothing and passed
        raise ValueError(f"--{what} {text!r}: names none; use {', '.join(allowed)}")
    for name in names:
        if name not in allowed:
            raise ValueError(f"--{what} {name}: use {', '.join(allowed)}")
    return names


def parse_regression(text: str) -> float:
    """``10%`` or ``0.1``."""
    try:
        return parse_fraction(text if "%" in text else float(text))
    except ValueError as error:
        raise ValueError(f"--max-regression {text}: {error}") from None


def compare_summaries(
    base: Summary,
    candidate: Summary,
    metrics: tuple[str, ...] = DEFAULT_METRICS,
    statistics: tuple[str, ...] = DEFAULT_STATISTICS,
    max_regression: float = 0.10,
) -> ComparisonResult:
    rows = []
    scopes: list[tuple[str, Summary, Summary]] = [(ALL_CLASSES, base, candidate)]
    for name in sorted(set(base.get("classes", {})) & set(candidate.get("classes", {}))):
        if len(base["classes"]) > 1 or len(candidate["classes"]) > 1:
            scopes.append((name, base["classes"][name], candidate["classes"][name]))
    for scope, base_scope, candidate_scope in scopes:
        for metric in metrics:
            for statistic in statistics:
                rows.append(
                    _row(scope, metric, statistic, base_scope, candidate_scope, max_regression)
                )
    _judge_with_intervals(rows, scopes, max_regression)
    return ComparisonResult(rows, max_regression)


def _judge_with_intervals(
    rows: list[Comparison], scopes: list[tuple[str, Summary, Summary]], max_regression: float
) -> None:
    """Each row both of whose runs have an interval is judged by its change's interval; a
    row without one where its runs make intervals (a tail not measured) is inconclusive: its
    value alone is where noise is largest."""
    by_scope = {scope: (base, candidate) for scope, base, candidate in scopes}
    judged: list[tuple[Comparison, _Spread, _Spread]] = []
    for row in rows:
        if row.too_few or not row.base or not row.candidate:
            continue
        base, candidate = (_spread(scope, row) for scope in by_scope[row.scope])
        if base is not None and candidate is not None:
            judged.append((row, base, candidate))
        elif _has_intervals(*by_scope[row.scope], row.metric, row.statistic):
            row.verdict, row.regressed = "inconclusive", False
    limit = math.log1p(max_regression)
    # Bonferroni over the figures judged: each at FAMILY_ALPHA / m, two-sided, on each run's
    # own t (k - 1 degrees of freedom) in place of the 0.975 quantile its interval has
    level = 1 - FAMILY_ALPHA / (2 * max(len(judged), 1))
    for row, base, candidate in judged:
        assert row.base and row.candidate
        half = math.hypot(base.widened(level), candidate.widened(level))
        change = math.log(row.candidate / row.base)
        low, high = change - half, change + half
        row.ci95 = [round(math.expm1(low), 4), round(math.expm1(high), 4)]
        if low > limit:
            row.verdict = "regressed"
        elif high < -limit:
            row.verdict = "improved"
        elif high <= limit:
            row.verdict = "within"
        else:  # the interval must shrink to |change - limit|: ~1/sqrt(run length)
            row.verdict = "inconclusive"
            needed = abs(change - limit)
            row.longer = round((half / needed) ** 2, 1) if needed > 0 else None
        row.regressed = row.verdict == "regressed"


@dataclass(frozen=True)
class _Spread:
    """A figure's 95 % half-width on the log scale and the sections it came from."""

    half: float
    sections: int

    def widened(self, level: float) -> float:
        degrees = max(self.sections - 1, 1)
        return self.half * t_quantile(level, degrees) / t_975(degrees)


def _spread(scope: Summary, row: Comparison) -> _Spread | None:
    """The run's interval of ``row``'s figure, relative (None: none, or clipped at 0)."""
    figures = cast(Mapping[str, Any], scope["metrics"].get(row.metric) or {})
    bounds = (figures.get("ci95") or {}).get(row.statistic)
    value = figures.get(row.statistic)
    if not bounds or not value or bounds[0] <= 0:
        return None
    low, high = bounds
    half = max(math.log(max(high, value) / value), math.log(value / min(low, value)))
    return _Spread(half, int(figures.get("ci95_sections") or SECTIONS))


def _has_intervals(base: Summary, candidate: Summary, metric: str, statistic: str) -> bool:
    """Whether both runs made ``statistic``'s interval for ``metric``, measured or not (a
    mean or a max never has one: judged by its value, as before)."""
    return all(
        statistic in ((scope["metrics"].get(metric) or {}).get("ci95") or {})
        for scope in (base, candidate)
    )


def _row(
    scope: str,
    metric: str,
    statistic: str,
    base: Summary,
    candidate: Summary,
    max_regression: float,
) -> Comparison:
    if not is_statistic(statistic):  # parse_choices and the scenario's SLO allow no other
        raise ValueError(f"unknown statistic {statistic!r}")
    old, new = base["metrics"][metric], candidate["metrics"][metric]
    base_value = old[statistic] if old["count"] else None
    candidate_value = new[statistic] if new["count"] else None
    base_above = old["above"].get(statistic) if old["count"] else None
    candidate_above = new["above"].get(statistic) if new["count"] else None
    too_few = base_value is None or candidate_value is None
    if statistic.startswith("p") and not too_few:
        too_few = min(base_above or 0, candidate_above or 0) < TAIL_MIN_SAMPLES
    change = None
    if base_value and candidate_value is not None:
        change = (candidate_value - base_value) / base_value
    regressed = not too_few and change is not None and change > max_regression
    verdict: Verdict = "too few" if too_few else ("regressed" if regressed else "within")
    return Comparison(
        scope,
        metric,
        statistic,
        base_value,
        candidate_value,
        change,
        base_above,
        candidate_above,
        too_few,
        regressed,
        verdict,
    )


def _value(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _mark(row: Comparison) -> str:
    if row.too_few:
        return f"too few samples above (< {TAIL_MIN_SAMPLES})"
    interval = ""
    if row.ci95 is not None:
        low, high = (f"{signed(bound * 100, 1)}%" for bound in row.ci95)
        interval = f" ({low} .. {high})"
    if row.verdict == "inconclusive":
        longer = f"; runs ~{row.longer:g}x as long would decide" if row.longer else ""
        return f"inconclusive{interval}{longer}"
    if row.verdict == "regressed":
        return f"REGRESSED{interval}"
    return f"{row.verdict}{interval}" if row.ci95 is not None else ""


def format_table(result: ComparisonResult) -> str:
    lines = [
        f"{'scope':<12}{'metric':<14}{'stat':<8}{'base ms':>11}{'cand. ms':>11}{'change':>9}  mark"
    ]
    for row in result.rows:
        lines.append(
            f"{printable(row.scope):<12}{row.metric:<14}{row.statistic:<8}{_value(row.base):>11}"
            f"{_value(row.candidate):>11}{row.change_text:>9}  {_mark(row)}".rstrip()
        )
    lines.append(_verdict_line(result))
    return "\n".join(lines)


def format_markdown(result: ComparisonResult) -> str:
    lines = [
        "| scope | metric | stat | base ms | candidate ms | change | |",
        "|---|---|---|---:|---:|---:|---|",
    ]
    for row in result.rows:
        lines.append(
            f"| {printable(row.scope)} | {row.metric} | {row.statistic} | {_value(row.base)} | "
            f"{_value(row.candidate)} | {row.change_text} | {_mark(row)} |"
        )
    lines += ["", _verdict_line(result)]
    return "\n".join(lines)


def format_json(result: ComparisonResult) -> str:
    return json.dumps(result.to_dict(), indent=2)


def _verdict_line(result: ComparisonResult) -> str:
    limit = f"{result.max_regression * 100:g}%"
    if not result.regressions:
        undecided = sum(row.verdict == "inconclusive" for row in result.rows)
        more = f" ({undecided} inconclusive: longer runs would decide them)" if undecided else ""
        return f"no gated percentile regressed more than {limit}{more}"
    named = ", ".join(
        f"{printable(r.scope)} {r.metric} {r.statistic} {r.change_text}" for r in result.regressions
    )
    return f"REGRESSED beyond {limit}: {named}"


__all__ = [
    "LATENCY_METRICS",
    "STATISTICS",
    "Comparison",
    "ComparisonResult",
    "compare_summaries",
    "format_json",
    "format_markdown",
    "format_table",
    "parse_choices",
    "parse_regression",
]
