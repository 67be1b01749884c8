"""Validation of scenario documents: every key checked, every error located.

Errors read ``scenarios/x.yaml:14:5: classes.decode.output_tokens.mean: must be > 0``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar, cast

from tpot_locust.apis import API_NAMES
from tpot_locust.common.distributions import DistributionError, parse_distribution
from tpot_locust.common.metric_catalogue import ALL_CLASSES
from tpot_locust.common.tls import client_tls_context
from tpot_locust.common.tokens import TokenizerError, load_tokenizer
from tpot_locust.scenario import value_checks as checks
from tpot_locust.scenario.datasets import Conversation, load_dataset
from tpot_locust.scenario.limits import MAX_BURSTS
from tpot_locust.scenario.model import (
    Burst,
    BurstSpec,
    Scenario,
    Server,
    Simulator,
    Stage,
    StageSpec,
    Sweep,
    Timeouts,
    Tls,
    TraceSpec,
    TrafficClass,
    scenario_keys,
)
from tpot_locust.scenario.parsed_values import OrZero, ParsedDistribution
from tpot_locust.scenario.simulator_section import EngineCheck, validate_engine, validate_reasoning
from tpot_locust.scenario.slo import SloSpec, parse_slo
from tpot_locust.scenario.trace_formats import AUTO, FORMATS, load_trace_spec
from tpot_locust.scenario.yaml_source import Located, did_you_mean

ARRIVALS = ("poisson", "gamma", "constant")
_Section = TypeVar("_Section")  # a section's dataclass (``parse_section``)


def check_keys(located: Located, path: str, data: object, allowed: set[str]) -> dict[str, object]:
    """The known keys of a mapping; each unknown one is noted as a problem (with the
    allowed key it is closest to) and left out, so validation goes on."""
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise located.error(path, "must be a mapping")
    known = {}
    for key, value in data.items():
        if key in allowed:
            known[key] = value
            continue
        if located.problems.full:  # past the listed ones: counted, not described
            located.problems.dropped += 1
            continue
        child = f"{path}.{key}" if path else key
        hint = did_you_mean(str(key), allowed)
        located.problems.append(
            located.error(child, f"unknown key{hint}; allowed: {', '.join(sorted(allowed))}")
        )
    return known


def distribution(located: Located, path: str, value: object, base_dir: Path) -> ParsedDistribution:
    """A number or a distribution, parsed here once (an empirical file read once)."""
    try:
        return ParsedDistribution(value, parse_distribution(value, base_dir))
    except DistributionError as error:
        raise located.error(f"{path}.{error.key}" if error.key else path, str(error)) from None


# The simulator's check of a profile and its overrides: raises ValueError with the reason.


def validate(located: Located, check_engine: EngineCheck | None = None) -> Scenario:
    """The scenario, or ``ScenarioErrors`` listing every problem in the document."""
    top = scenario_keys(Scenario)
    data = check_keys(located, "", located.data, set(top))
    base_dir = Path(located.source).parent
    simple: dict[str, Any] = {}  # the keys checked by their check alone, by field
    for name, meta in top.items():
        if meta["check"] != "part" and data.get(name) is not None:
            with located.keep_going():
                simple[meta["field"]] = CHECKS[meta["check"]](located, name, data[name], base_dir)
    server = Server()
    with located.keep_going():
        server, _ = parse_section(located, "server", data.get("server"), Server, base_dir)
    if server.extra_body is not None:  # a mapping here: anything else is noted already
        with located.keep_going():
            checks.extra_body(located, "server.extra_body", server.extra_body, base_dir)
    classes: list[TrafficClass] = []
    classes_data = data.get("classes")
    if not isinstance(classes_data, dict) or not classes_data:
        located.problems.append(
            located.error("classes", "needs at least one traffic class (name -> class)")
        )
        classes_data = {}
    for name, spec in classes_data.items():
        with located.keep_going():
            classes.append(_validate_class(located, str(name), spec, base_dir))
    names = set(classes_data)
    stages: list[Stage] = []
    with located.keep_going():
        stages = _validate_stages(located, data.get("stages"), classes)
    duration_s = 60.0
    with located.keep_going():
        if stages and "duration" in data:
            raise located.error("duration", "the stages set the duration; remove one of them")
        if stages:
            duration_s = sum(stage.duration_s for stage in stages)
        else:
            duration_s = checks.duration(located, "duration", data.get("duration", "60s"))
    bursts: list[Burst] = []
    with located.keep_going():
        bursts = _validate_bursts(located, data.get("bursts"), names, duration_s, base_dir)
    with located.keep_going():
        if simple.get("warmup_s", 0) + simple.get("cooldown_s", 0) >= duration_s:
            raise located.error("warmup", "warmup + cooldown must be shorter than the duration")
    simulator = Simulator()
    with located.keep_going():
        simulator, given = parse_section(
            located, "simulator", data.get("simulator"), Simulator, base_dir
        )
        validate_engine(located, simulator, given, check_engine)
        validate_reasoning(located, simulator, server)
    slo = SloSpec()
    with located.keep_going():
        models = frozenset(name for traffic in classes for name in traffic.model or {})
        slo = parse_slo(located, data.get("slo"), set(names), models)
    sweep = None
    if data.get("sweep") is not None:
        with located.keep_going():
            sweep = _validate_sweep(located, data["sweep"], classes, base_dir)
    located.raise_problems()
    return Scenario(
        source=located.source,
        **simple | {"name": simple.get("name") or Path(located.source).stem},
        duration_s=duration_s,
        classes=classes,
        server=server,
        simulator=simulator,
        slo=slo,
        stages=stages,
        bursts=bursts,
        sweep=sweep,
    )


def parse_section(
    located: Located,
    path: str,
    data: object,
    section: type[_Section],
    base_dir: Path,
    **fixed: object,
) -> tuple[_Section, dict[str, object]]:
    """The section's dataclass from its mapping, each key checked as its ``key`` declares
    (``CHECKS``); also the keys as given, for rules between keys."""
    allowed = scenario_keys(section)
    given = check_keys(located, path, data, set(allowed))
    values = {}
    for name, value in given.items():
        with located.keep_going():
            meta = allowed[name]
            values[meta["field"]] = CHECKS[meta["check"]](
                located, f"{path}.{name}", value, base_dir
            )
    return section(**fixed, **values), given


def _validate_class(located: Located, name: str, data: object, base_dir: Path) -> TrafficClass:
    path = f"classes.{name}"
    if not checks.IDENTIFIER.fullmatch(name):
        raise located.error(path, "class names must be identifiers (letters, digits, _)")
    if name == ALL_CLASSES:  # the reports, compare, gates and live metrics: every class
        raise located.error(path, f"'{ALL_CLASSES}' names every class together: pick another")
    traffic, spec = parse_section(located, path, data, TrafficClass, base_dir, name=name)
    modes = [key for key in ("users", "rate", "trace") if key in spec]
    if len(modes) > 1:
        raise located.error(
            f"{path}.{modes[1]}",
            "a class is closed loop (users) or open loop (rate, or a trace): one of them",
        )
    if not modes:
        raise located.error(
            path,
            "needs users (closed loop), rate (open loop, per second) or "
            "trace (a JSONL file of timed requests)",
        )
    if traffic.trace is not None:
        with located.keep_going():  # errors name file:line
            fmt, traffic.trace_requests = load_trace_spec(traffic.trace)
            for option in ("model", "log_type"):
                if getattr(traffic.trace, option) is not None and fmt != "burstgpt":
                    raise located.error(
                        f"{path}.trace.{option}",
                        f"only for BurstGPT traces (this one reads as {fmt})",
                    )
    for key in ("arrival", "burstiness", "max_in_flight"):
        if key in spec and "rate" not in spec:
            located.problems.append(
                located.error(f"{path}.{key}", "only for open-loop classes (rate)")
            )
    if "speedup" in spec and "trace" not in spec:
        located.problems.append(located.error(f"{path}.speedup", "only with a trace"))
    if "dataset_order" in spec and "dataset" not in spec:
        located.problems.append(located.error(f"{path}.dataset_order", "only with a dataset"))
    if "dataset" in spec and "trace" in spec:
        located.problems.append(
            located.error(f"{path}.dataset", "not with a trace (its lines are the prompts)")
        )
    return traffic


def _api(located: Located, path: str, value: object, base_dir: Path) -> str:
    if value not in API_NAMES:
        raise located.error(path, f"must be one of {', '.join(API_NAMES)}")
    return str(value)  # one of the names: a str


def _timeouts(located: Located, path: str, value: object, base_dir: Path) -> Timeouts:
    return parse_section(located, path, value, Timeouts, base_dir)[0]


def _tls(located: Located, path: str, value: object, base_dir: Path) -> Tls:
    return parse_section(located, path, value, Tls, base_dir)[0]


def _ca_file(located: Located, path: str, value: object, base_dir: Path) -> str:
    """A CA file, loaded here once so that a bad one stops the run before it starts."""
    given = Path(checks.path_text(located, path, value)).expanduser()
    resolved = given if given.is_absolute() else base_dir / given
    try:
        client_tls_context(str(resolved), True)
    except (OSError, ValueError) as error:  # ssl.SSLError is an OSError
        reason = getattr(error, "strerror", None) or getattr(error, "reason", None) or error
        raise located.error(path, f"not a CA file we can load: {reason}") from None
    return str(resolved)


def _arrival(located: Located, path: str, value: object, base_dir: Path) -> str:
    if value not in ARRIVALS:
        raise located.error(path, f"must be one of {', '.join(ARRIVALS)}")
    return str(value)  # one of the names: a str


def _time(located: Located, path: str, value: object, base_dir: Path) -> OrZero:
    """Seconds: 0 (none) or a distribution."""
    return value if value == 0 else distribution(located, path, value, base_dir)


def _distribution_or_zero(located: Located, path: str, value: object, base_dir: Path) -> OrZero:
    """A length: 0 (none) or a distribution."""
    if value == 0 and not isinstance(value, bool):
        return cast(float, value)  # 0 or 0.0 as written: the simulator's flag repeats it
    return distribution(located, path, value, base_dir)


def _as_given(located: Located, path: str, value: object, base_dir: Path) -> object:
    return value  # checked by its owner (the simulator's profile check)


def _tokenizer(located: Located, path: str, value: object, base_dir: Path) -> str:
    """A local tokenizer, loaded here once so that a bad one stops the run before it starts."""
    given = Path(checks.path_text(located, path, value)).expanduser()
    resolved = given if given.is_absolute() else base_dir / given
    try:
        load_tokenizer(resolved)
    except TokenizerError as error:
        raise located.error(path, str(error)) from None
    return str(resolved.resolve())


def _dataset(
    located: Located, path: str, value: object, base_dir: Path
) -> tuple[Conversation, ...]:
    """A dataset file's conversations, read here once: its errors (file:line) stop the run
    before it, and the user classes take what was read."""
    given = Path(checks.path_text(located, path, value)).expanduser()
    resolved = given if given.is_absolute() else base_dir / given
    return tuple(load_dataset(resolved))


DATASET_ORDERS = ("random", "sequential")


def _dataset_order(located: Located, path: str, value: object, base_dir: Path) -> str:
    if value not in DATASET_ORDERS:
        raise located.error(path, f"must be one of {', '.join(DATASET_ORDERS)}")
    return str(value)  # one of the names: a str


def _trace(located: Located, path: str, value: object, base_dir: Path) -> TraceSpec | None:
    """A trace's file name (ours, or a published format told by its first row), or
    ``{file, format, start, duration, ...}`` (``TraceSpec``); None when a key of it was
    refused (the problem is noted; nothing is read)."""
    if not isinstance(value, dict):
        return TraceSpec(file=_trace_file(located, path, value, base_dir))
    if "file" not in value:
        raise located.error(path, "file: is required (the trace to replay)")

    def noted() -> int:
        return len(located.problems) + located.problems.dropped

    before = noted()
    spec = parse_section(located, path, value, TraceSpec, base_dir)[0]
    return spec if noted() == before else None


def _trace_file(located: Located, path: str, value: object, base_dir: Path) -> str:
    trace = Path(checks.path_text(located, path, value))
    return str(trace if trace.is_absolute() else base_dir / trace)


def _trace_format(located: Located, path: str, value: object, base_dir: Path) -> str:
    if value != AUTO and value not in FORMATS:
        raise located.error(path, f"must be one of {AUTO}, {', '.join(FORMATS)}")
    return str(value)


def _validate_sweep(
    located: Located, data: object, classes: list[TrafficClass], base_dir: Path
) -> Sweep:
    sweep, given = parse_section(located, "sweep", data, Sweep, base_dir)
    fitting = [c.name for c in classes if _sweepable(c, sweep.vary)]
    if sweep.class_name is None:
        if len(fitting) != 1:
            raise located.error(
                "sweep",
                f"class: is required (which class's {sweep.vary}: "
                f"{', '.join(fitting) or 'none fits'})",
            )
        sweep.class_name = fitting[0]
    elif sweep.class_name not in fitting:
        raise located.error(
            "sweep.class",
            f"must name a class with {sweep.vary}: {', '.join(fitting) or 'none has'}",
        )
    if ("values" in given) == ("start" in given):
        raise located.error("sweep", "needs values (a list) or start and limit (doubling)")
    if "start" in given and "limit" not in given:
        raise located.error("sweep.start", "needs limit: doubling stops past it")
    if sweep.vary == "users":
        for name, values in (("values", sweep.values or []), ("start", [sweep.start or 1])):
            if any(v != int(v) for v in values):
                raise located.error(f"sweep.{name}", "users must be whole numbers")
    if sweep.step_duration is not None and (sweep.warmup or 0) >= sweep.step_duration:
        raise located.error("sweep.warmup", "must be shorter than step_duration")
    return sweep


def _sweepable(traffic: TrafficClass, vary: str) -> bool:
    if vary == "users":
        return not traffic.open_loop and traffic.users > 0
    return (traffic.rate if vary == "rate" else traffic.trace) is not None


CHECKS: dict[str, Callable[[Located, str, object, Path], object]] = {
    "api": _api,
    "arrival": _arrival,
    "count": checks.count,
    "dataset": _dataset,
    "dataset_order": _dataset_order,
    "distribution": distribution,
    "distribution_or_zero": _distribution_or_zero,
    "event_bytes": checks.event_bytes,
    "duration": checks.duration_key,
    "duration_or_zero": checks.duration_or_zero,
    "whole_seconds": checks.whole_seconds,
    "env_name": checks.env_name,
    "flag": checks.flag,
    "headers": checks.headers,
    "mapping": checks.mapping,
    "metrics_interval": checks.metrics_interval,
    "metrics_url": checks.metrics_url,
    "gpu_metrics": checks.gpu_metrics,
    "name": checks.name,
    "output": checks.output,
    "positive": checks.positive,
    "tokens": checks.tokens,
    "positive_integer": checks.positive_integer,
    "profile": _as_given,
    "rate": checks.rate,
    "ratio": checks.ratio,
    "seed": checks.seed,
    "sweep_values": checks.sweep_values,
    "sweep_variable": checks.sweep_variable,
    "text": checks.plain_text,
    "time": _time,
    "timeouts": _timeouts,
    "tokenizer": _tokenizer,
    "trace": _trace,
    "url": checks.url,
    "wait": _time,
    "part": _as_given,
    "tls": _tls,
    "ca_file": _ca_file,
    "trace_file": _trace_file,
    "trace_format": _trace_format,
    "model_split": checks.model_split,
}


def _validate_stages(located: Located, data: object, classes: list[TrafficClass]) -> list[Stage]:
    if data is None:
        return []
    if not isinstance(data, list) or not data:
        raise located.error("stages", "must be a list of stages")
    open_names = {t.name for t in classes if t.rate is not None}
    base_dir = Path(located.source).parent
    stages = []
    for index, item in enumerate(data):
        path = f"stages.{index}"
        spec, given = parse_section(located, path, item, StageSpec, base_dir)
        if "duration" not in given:
            raise located.error(path, "duration: is required")
        rates = check_keys(located, f"{path}.rate", spec.rate, open_names)
        for name, rate in rates.items():
            checks.number(located, f"{path}.rate.{name}", rate, strict=False)  # <= MAX_NUMBER
        if spec.duration is not None:  # else its error is noted already
            numbers = {name: float(cast(float, rate)) for name, rate in rates.items()}  # checked
            stages.append(Stage(spec.duration, spec.users, numbers))
    return stages


def _count_bursts(located: Located, path: str, so_far: int, count: int) -> int:
    """The burst times of every entry so far, ``count`` more: at most ``MAX_BURSTS`` in all
    (1,000 entries of 100,000 each took 3.9 GB to validate)."""
    if so_far + count > MAX_BURSTS:
        raise located.error(
            path,
            f"brings the bursts to {so_far + count:,} burst times in all; at most {MAX_BURSTS:,}",
        )
    return so_far + count


def _validate_bursts(
    located: Located, data: object, names: set[str], duration_s: float, base_dir: Path
) -> list[Burst]:
    if data is None:
        return []
    if not isinstance(data, list):
        raise located.error("bursts", "must be a list of bursts")
    if len(data) > MAX_BURSTS:
        raise located.error(
            "bursts", f"{len(data):,} entries; at most {MAX_BURSTS:,} burst times in all"
        )
    bursts = []
    expanded = 0  # burst times of every entry so far: bounded before any list is made
    for index, item in enumerate(data):
        path = f"bursts.{index}"
        spec, given = parse_section(located, path, item, BurstSpec, base_dir)
        if spec.class_name not in names:
            raise located.error(f"{path}.class", f"must name a class: {', '.join(sorted(names))}")
        if ("at" in given) == ("every" in given):
            raise located.error(path, "needs exactly one of at (times) or every (period)")
        if "at" in given:
            at = spec.at if isinstance(spec.at, list) else [spec.at]
            expanded = _count_bursts(located, path, expanded, len(at))
            times = [
                checks.duration(located, f"{path}.at.{i}", t, positive=False)
                for i, t in enumerate(at)
            ]
        elif spec.every is not None:
            start = spec.every if spec.start is None else spec.start
            count = max(0, int((duration_s - start) // spec.every) + 1)
            if count > MAX_BURSTS:
                raise located.error(
                    f"{path}.every", f"gives {count:,} bursts in the run; at most {MAX_BURSTS:,}"
                )
            expanded = _count_bursts(located, path, expanded, count)
            times = [start + i * spec.every for i in range(count)]
        else:
            continue  # its every was wrong: noted already
        if not any(t < duration_s for t in times):  # a run that never burst had passed
            first = f"its first at {min(times):g} s, " if times else ""
            raise located.error(path, f"{first}past the run's {duration_s:g} s: it never fires")
        bursts.append(
            Burst(
                spec.class_name,
                spec.count,
                tuple(t for t in sorted(times) if t < duration_s),
                spec.prompt_tokens,
                spec.output_tokens,
            )
        )
    return bursts
