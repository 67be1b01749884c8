"""The ``slo`` block of a scenario: the objectives a release gate holds a run to.

Parsed and validated here (errors located like every other block); evaluated against a
run's summary in ``gate``. Pure data: no Locust, no gevent, so a worker's recorder, the
master's gate and ``tpot-locust validate`` all read the same model.

    slo:
      tpot: {p50: 2ms, p99: 15ms, p99.99: 150ms}   # upper bounds on any printed statistic
      ttft: {p99: 800ms}
      error_rate: 0.1%                              # failed / (ok + failed), at most
      throughput: {tokens_per_s: 500}               # at least
      goodput: {ttft: 800ms, request_tpot: 50ms, min_fraction: 95%}
      pace: {tokens_per_s: 20, ttft: 2s, min_on_time: 99%}  # a reader's deadlines
      stall_time: {p99: 500ms}                      # (with pace) waits beyond them
      interference: {tpot_p99: 3.0}                 # burst / steady, at most
      classes: {long_prompt: {ttft: {p90: 3s}}}
      models: {lora-b: {tpot: {p99: 20ms}}}          # a model some class names
      min_samples_above: 10                         # per percentile verdict
      insufficient: fail                            # or warn
      baseline: {results: results/base, max_regression: 10%}
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field, replace
from typing import Any

from tpot_locust.common import metric_catalogue as catalogue
from tpot_locust.common.metric_catalogue import TPOT, TTFT
from tpot_locust.common.percentiles import STATISTICS, UP_TO_P99_9
from tpot_locust.scenario.slo_fields import count, field_names, parsed, positive
from tpot_locust.scenario.slo_values import format_value, parse_fraction, parse_time_ms
from tpot_locust.scenario.yaml_source import Located, did_you_mean

# Every metric the report prints, and every statistic of it that the gate can hold.
LATENCY_METRICS = catalogue.names("gateable")
# Per-request thresholds that make a request "good" (vLLM's and AIPerf's goodput).
GOODPUT_METRICS = catalogue.names("goodput")
THROUGHPUT_KEYS = ("tokens_per_s", "requests_per_s")
INTERFERENCE_METRICS = catalogue.names("phased")
INTERFERENCE_STATISTICS = UP_TO_P99_9
# Fewer samples than this above a percentile: that tail is not yet measured (the report
# says so, compare does not gate on it, and an SLO verdict on it is insufficient).
TAIL_MIN_SAMPLES = 10
DEFAULT_MIN_SAMPLES_ABOVE = TAIL_MIN_SAMPLES
INSUFFICIENT_POLICIES = ("fail", "warn")
# invalid: any stall-tagged sample above a gated percentile makes its verdict invalid;
# decisive: only when setting those samples aside would change pass into fail or back.
CLIENT_STALL_POLICIES = ("invalid", "decisive")
# Before the gating issue the block was flat: tpot_p99_ms: 25, ttft_p99_ms: 2000.
_LEGACY_KEY = re.compile(r"^([a-z_]+?)_(p[0-9.]+|mean|max)_ms$")


@dataclass(frozen=True)
class Objective:
    """One bound: ``metric``'s ``statistic`` (for ``class_name``, ``model``, or all
    traffic) is at most (``upper``) or at least ``limit``. Times are in ms, fractions in
    0..1."""

    kind: str  # latency | error_rate | throughput | goodput | interference | fluidity
    metric: str
    statistic: str | None
    limit: float
    class_name: str | None = None
    upper: bool = True
    min_samples_above: int = DEFAULT_MIN_SAMPLES_ABOVE
    key_path: str = ""  # where the scenario set it (slo.tpot.p99), for messages
    model: str | None = None  # the model (``classes.<name>.model``) it applies to

    @property
    def unit(self) -> str:
        """What ``limit`` and the measured figure are in: ms, fraction, ratio or per_s."""
        if self.kind == "latency":
            return "ms"
        if self.kind == "error_rate" or self.metric in ("good_fraction", "on_time_fraction"):
            return "fraction"
        return "ratio" if self.kind == "interference" else "per_s"

    @property
    def name(self) -> str:
        scope = (
            f"{self.class_name}: "
            if self.class_name
            else f"model {self.model}: "
            if self.model
            else ""
        )
        what = f"{self.metric} {self.statistic}" if self.statistic else self.metric
        return f"{scope}{what} {'<=' if self.upper else '>='} {format_limit(self)}"


@dataclass(frozen=True)
class GoodputRule:
    """Per-request limits in ns; a successful request is good when it meets all of them."""

    limits_ns: dict[str, int]

    def met_by(self, request_ns: dict[str, float]) -> bool:
        """``request_ns``: the request's one-sample metrics (a one-token request has no
        gap and no request TPOT, and so meets those limits)."""
        return all(request_ns.get(metric, 0) <= limit for metric, limit in self.limits_ns.items())

    def as_ms(self) -> dict[str, float]:
        return {metric: ns / 1e6 for metric, ns in self.limits_ns.items()}


@dataclass(frozen=True)
class Pace:
    """``slo.pace``: a reader's deadlines in ns (``metrics.fluidity``): the first token
    ``ttft_ns`` after the send, each next one ``tpot_ns`` after the one before."""

    ttft_ns: int
    tpot_ns: int

    def as_ms(self) -> dict[str, float]:
        return {TTFT.name: self.ttft_ns / 1e6, TPOT.name: self.tpot_ns / 1e6}


DEFAULT_PACE_TTFT_MS = 1000.0  # the first token's deadline when a pace gives only a rate


@dataclass(frozen=True)
class Baseline:
    """A saved run to compare against: a gated percentile may not regress more than this."""

    results: str
    max_regression: float = 0.10
    metrics: tuple[str, ...] = (TPOT.name, TTFT.name)
    percentiles: tuple[str, ...] = ("p50", "p99")


@dataclass(frozen=True)
class SloSpec:
    objectives: tuple[Objective, ...] = ()
    goodput: GoodputRule | None = None
    insufficient: str = "fail"
    baseline: Baseline | None = None
    client_stalls: str = "invalid"
    raw: dict[str, object] = field(default_factory=dict)  # as written, for the results
    pace: Pace | None = None  # a reader's deadlines: fluidity and stall time

    @property
    def empty(self) -> bool:
        return not self.objectives and self.baseline is None


def format_limit(objective: Objective) -> str:
    return format_value(objective.limit, objective.unit, fraction_digits="g")


def parse_slo(
    located: Located, data: object, class_names: set[str], model_names: frozenset[str] = frozenset()
) -> SloSpec:
    """The validated ``slo`` block; each problem is noted on ``located`` (validation goes on).
    ``model_names``: the models the classes name (``slo.models`` may hold only those)."""
    if data is None:
        return SloSpec()
    if not isinstance(data, dict):
        raise located.error("slo", "must be a mapping (see scenarios/README.md, Release gating)")
    data = _migrate_legacy(located, data)
    min_samples = DEFAULT_MIN_SAMPLES_ABOVE
    if "min_samples_above" in data:
        with located.keep_going():
            min_samples = count(located, "slo.min_samples_above", data["min_samples_above"])
    insufficient = data.get("insufficient", "fail")
    if insufficient not in INSUFFICIENT_POLICIES:
        located.problems.append(located.error("slo.insufficient", "must be fail or warn"))
    client_stalls = data.get("client_stalls", "invalid")
    if client_stalls not in CLIENT_STALL_POLICIES:
        located.problems.append(located.error("slo.client_stalls", "must be invalid or decisive"))
    objectives = _scope_objectives(located, "slo", data, None, min_samples, top=True)
    for name, path, spec in _named_scopes(located, data, "classes", class_names, "no such class"):
        objectives += _scope_objectives(located, path, spec, name, min_samples, top=False)
    named = (
        f"; the classes name {', '.join(sorted(model_names))}"
        if model_names
        else "; no class names a model (classes.<name>.model)"
    )
    unnamed = "no class names this model"
    for name, path, spec in _named_scopes(located, data, "models", model_names, unnamed, named):
        scoped = _scope_objectives(located, path, spec, None, min_samples, top=False)
        objectives += [replace(objective, model=name) for objective in scoped]
    goodput = None
    if "goodput" in data:
        with located.keep_going():
            goodput, goodput_objectives = _goodput(located, data["goodput"])
            objectives += goodput_objectives
    baseline = None
    if "baseline" in data:
        with located.keep_going():
            baseline = _baseline(located, data["baseline"])
    pace = None
    if "pace" in data:
        with located.keep_going():
            pace, pace_objectives = _pace(located, data["pace"])
            objectives += pace_objectives
    return SloSpec(
        tuple(objectives),
        goodput,
        str(insufficient),
        baseline,
        str(client_stalls),
        dict(data),
        pace,
    )


def _named_scopes(
    located: Located,
    data: dict[str, object],
    key: str,
    known: AbstractSet[str],
    unknown: str,
    known_words: str = "",
) -> Iterator[tuple[str, str, dict[str, object]]]:
    """``slo.classes`` or ``slo.models``: each known name, its path and its mapping; an
    unknown name (``unknown``, a did-you-mean and ``known_words``) or a spec that is no
    mapping is noted on ``located``."""
    scopes = data.get(key) or {}
    if not isinstance(scopes, dict):
        noun = "class" if key == "classes" else "model"
        located.problems.append(located.error(f"slo.{key}", f"must map {noun} names to SLOs"))
        return
    for name, spec in scopes.items():
        path = f"slo.{key}.{name}"
        if str(name) not in known:
            hint = did_you_mean(str(name), known)
            located.problems.append(located.error(path, f"{unknown}{hint}{known_words}"))
        elif not isinstance(spec, dict):
            located.problems.append(located.error(path, "must be a mapping"))
        else:
            yield str(name), path, spec


_SCOPE_KEYS = {*LATENCY_METRICS, "error_rate", "throughput", "interference"}
_TOP_KEYS = _SCOPE_KEYS | {
    "classes",
    "models",
    "goodput",
    "min_samples_above",
    "insufficient",
    "baseline",
    "client_stalls",
    "pace",
}
_PACE_KEYS = ("tokens_per_s", TPOT.name, TTFT.name, "min_on_time")  # deadlines of those


def _migrate_legacy(located: Located, data: dict[str, object]) -> dict[str, object]:
    """``tpot_p99_ms: 25`` reads as ``tpot: {p99: 25ms}`` (the block's first, flat form)."""
    migrated: dict[str, object] = {}
    for key, value in data.items():
        match = _LEGACY_KEY.match(str(key))
        if match and match.group(1) in LATENCY_METRICS and str(key) not in _TOP_KEYS:
            metric, statistic = match.groups()
            nested = migrated.setdefault(metric, {})
            if isinstance(nested, dict):
                if statistic in nested:
                    located.problems.append(
                        located.error(f"slo.{key}", f"also set as slo.{metric}.{statistic}")
                    )
                nested[statistic] = value
                located.positions.setdefault(
                    f"slo.{metric}.{statistic}", located.positions.get(f"slo.{key}", (1, 1))
                )
                continue
        migrated[key] = value
    return migrated


def _scope_objectives(
    located: Located,
    path: str,
    data: dict[str, object],
    class_name: str | None,
    min_samples: int,
    top: bool,
) -> list[Objective]:
    allowed = _TOP_KEYS if top else _SCOPE_KEYS
    objectives: list[Objective] = []
    for key, value in data.items():
        key_path = f"{path}.{key}"
        if key not in allowed:
            hint = did_you_mean(str(key), allowed)
            located.problems.append(
                located.error(key_path, f"unknown key{hint}; allowed: {', '.join(sorted(allowed))}")
            )
            continue
        with located.keep_going():
            if key in LATENCY_METRICS:
                objectives += _latency(located, key_path, key, value, class_name, min_samples)
            elif key == "error_rate":
                limit = parsed(located, key_path, value, parse_fraction)
                objectives.append(
                    Objective(
                        "error_rate", "error_rate", None, limit, class_name, True, 0, key_path
                    )
                )
            elif key == "throughput":
                objectives += _throughput(located, key_path, value, class_name)
            elif key == "interference":
                objectives += _interference(located, key_path, value, class_name)
    return objectives


def _latency(
    located: Located, path: str, metric: str, value: Any, class_name: str | None, min_samples: int
) -> list[Objective]:
    if not isinstance(value, dict):
        raise located.error(
            path,
            f"must map statistics to times, e.g. {{p99: 15ms}}; "
            f"statistics: {', '.join(STATISTICS)}",
        )
    own_min = min_samples
    if "min_samples_above" in value:
        own_min = count(located, f"{path}.min_samples_above", value["min_samples_above"])
    objectives = []
    for statistic, limit in value.items():
        key_path = f"{path}.{statistic}"
        if statistic == "min_samples_above":
            continue
        statistic = _statistic_key(statistic)
        if statistic not in STATISTICS:
            hint = did_you_mean(str(statistic), STATISTICS)
            located.problems.append(
                located.error(key_path, f"unknown statistic{hint}; use {', '.join(STATISTICS)}")
            )
            continue
        with located.keep_going():
            limit_ms = parsed(located, key_path, limit, parse_time_ms)
            objectives.append(
                Objective(
                    "latency", metric, statistic, limit_ms, class_name, True, own_min, key_path
                )
            )
    return objectives


def _statistic_key(statistic: object) -> str:
    """``p99``, ``P99``, ``99`` and ``99.0`` name the same percentile."""
    text = str(statistic).strip().lower()
    if re.fullmatch(r"\d+(\.\d+)?", text):
        text = f"p{float(text):g}"
    elif re.fullmatch(r"p\d+(\.\d+)?", text):
        text = f"p{float(text[1:]):g}"
    return text


def _throughput(located: Located, path: str, value: Any, class_name: str | None) -> list[Objective]:
    if not isinstance(value, dict):
        raise located.error(path, "must be a mapping, e.g. {tokens_per_s: 500}")
    objectives = []
    for key, minimum in value.items():
        key_path = f"{path}.{key}"
        if key not in THROUGHPUT_KEYS:
            hint = did_you_mean(str(key), THROUGHPUT_KEYS)
            located.problems.append(
                located.error(key_path, f"unknown key{hint}; use {', '.join(THROUGHPUT_KEYS)}")
            )
            continue
        limit = positive(located, key_path, minimum)
        objectives.append(Objective("throughput", key, None, limit, class_name, False, 0, key_path))
    return objectives


def _interference(
    located: Located, path: str, value: object, class_name: str | None
) -> list[Objective]:
    if not isinstance(value, dict):
        raise located.error(path, "must be a mapping, e.g. {tpot_p99: 3.0}")
    allowed = [f"{m}_{s}" for m in INTERFERENCE_METRICS for s in INTERFERENCE_STATISTICS]
    objectives = []
    for key, maximum in value.items():
        key_path = f"{path}.{key}"
        if key not in allowed:
            hint = did_you_mean(str(key), allowed)
            located.problems.append(
                located.error(key_path, f"unknown key{hint}; use {', '.join(allowed)}")
            )
            continue
        metric, statistic = str(key).split("_", 1)
        limit = positive(located, key_path, maximum)
        objectives.append(
            Objective("interference", metric, statistic, limit, class_name, True, 0, key_path)
        )
    return objectives


_GOODPUT_TARGETS = ("min_fraction", "min_per_s")


def _goodput(located: Located, value: object) -> tuple[GoodputRule, list[Objective]]:
    path = "slo.goodput"
    allowed = (*GOODPUT_METRICS, *_GOODPUT_TARGETS)
    if not isinstance(value, dict):
        raise located.error(path, "must be a mapping, e.g. {ttft: 800ms, min_fraction: 95%}")
    limits: dict[str, int] = {}
    objectives: list[Objective] = []
    for key, item in value.items():
        key_path = f"{path}.{key}"
        if key not in allowed:
            hint = did_you_mean(str(key), allowed)
            located.problems.append(
                located.error(key_path, f"unknown key{hint}; use {', '.join(allowed)}")
            )
        elif key in GOODPUT_METRICS:
            with located.keep_going():
                limits[key] = round(parsed(located, key_path, item, parse_time_ms) * 1e6)
        elif key == "min_fraction":
            with located.keep_going():
                limit = parsed(located, key_path, item, parse_fraction)
                objectives.append(
                    Objective("goodput", "good_fraction", None, limit, None, False, 0, key_path)
                )
        else:
            with located.keep_going():
                limit = positive(located, key_path, item)
                objectives.append(
                    Objective("goodput", "goodput_per_s", None, limit, None, False, 0, key_path)
                )
    if not limits:
        raise located.error(
            path, f"needs at least one per-request limit: {', '.join(GOODPUT_METRICS)}"
        )
    return GoodputRule(limits), objectives


def _pace(located: Located, value: object) -> tuple[Pace, list[Objective]]:
    """``pace: 20`` (tokens/s) or ``{tokens_per_s | tpot, ttft, min_on_time}``."""
    path = "slo.pace"
    if not isinstance(value, dict):
        value = {"tokens_per_s": value}
    if unknown := [key for key in value if key not in _PACE_KEYS]:
        hint = did_you_mean(str(unknown[0]), _PACE_KEYS)
        raise located.error(
            f"{path}.{unknown[0]}", f"unknown key{hint}; use {', '.join(_PACE_KEYS)}"
        )
    if ("tokens_per_s" in value) == (TPOT.name in value):
        raise located.error(
            path,
            "needs one of tokens_per_s (a reading pace) or tpot (when "
            "each token after the first is due after the one before)",
        )
    if TPOT.name in value:
        tpot_ms = parsed(located, f"{path}.{TPOT.name}", value[TPOT.name], parse_time_ms)
    else:
        tpot_ms = 1000 / positive(located, f"{path}.tokens_per_s", value["tokens_per_s"])
    ttft_ms = DEFAULT_PACE_TTFT_MS
    if TTFT.name in value:
        ttft_ms = parsed(located, f"{path}.{TTFT.name}", value[TTFT.name], parse_time_ms)
    objectives = []
    if "min_on_time" in value:
        key_path = f"{path}.min_on_time"
        limit = parsed(located, key_path, value["min_on_time"], parse_fraction)
        objectives.append(
            Objective("fluidity", "on_time_fraction", None, limit, None, False, 0, key_path)
        )
    return Pace(max(1, round(ttft_ms * 1e6)), max(1, round(tpot_ms * 1e6))), objectives


def _baseline(located: Located, value: object) -> Baseline:
    path = "slo.baseline"
    if isinstance(value, str):
        return Baseline(value)
    if not isinstance(value, dict) or "results" not in value:
        raise located.error(
            path, "must be a results folder, or {results: DIR, max_regression: 10%}"
        )
    allowed = {"results", "max_regression", "metrics", "percentiles"}
    for key in value:
        if key not in allowed:
            hint = did_you_mean(str(key), allowed)
            located.problems.append(located.error(f"{path}.{key}", f"unknown key{hint}"))
    baseline = Baseline(str(value["results"]))
    regression = baseline.max_regression
    if "max_regression" in value:
        regression = parsed(
            located, f"{path}.max_regression", value["max_regression"], parse_fraction
        )
    metrics = tuple(
        field_names(located, f"{path}.metrics", value.get("metrics"), LATENCY_METRICS)
        or baseline.metrics
    )
    percentiles = (
        tuple(
            _statistic_key(p)
            for p in field_names(located, f"{path}.percentiles", value.get("percentiles"), None)
        )
        or baseline.percentiles
    )
    for statistic in percentiles:
        if statistic not in STATISTICS:
            raise located.error(f"{path}.percentiles", f"{statistic}: use {', '.join(STATISTICS)}")
    return Baseline(baseline.results, regression, metrics, percentiles)
