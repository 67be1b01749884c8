"""Scenario files: load, validate with exact positions, and apply ``--set`` overrides.

This is the first subset of the scenario language (server, closed-loop traffic classes,
duration, simulator); see ``scenarios/README.md`` for every key. Unknown keys are errors.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tpot_locust.distributions import DistributionError, parse_distribution
from tpot_locust.yaml_source import Located, ScenarioError, load_located, parse_located

__all__ = ["Scenario", "TrafficClass", "ScenarioError", "load_scenario", "parse_duration"]

_DURATION = re.compile(r"^(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m)?(?:(\d+(?:\.\d+)?)s)?$")

TOP_KEYS = {"name", "description", "duration", "spawn_rate", "seed", "output", "server",
            "classes", "simulator", "slo"}  # fmt: skip
SERVER_KEYS = {"host", "api", "model", "headers", "api_key_env", "ignore_eos", "min_tokens",
               "include_usage", "extra_body", "timeouts"}  # fmt: skip
TIMEOUT_KEYS = {"connect", "first_token", "idle", "total"}
CLASS_KEYS = {"users", "prompt_tokens", "followup_tokens", "output_tokens", "turns",
              "think_time", "wait_time"}  # fmt: skip
SIMULATOR_KEYS = {"ttft_ms", "gap_ms", "natural_tokens", "seed", "model"}


def parse_duration(value: Any) -> float:
    """Seconds from ``90``, ``"90s"``, ``"2m"`` or ``"1h30m"`` (Locust's -t syntax)."""
    if isinstance(value, bool):
        raise ValueError("must be a duration like 30s, 5m or 1h30m")
    if isinstance(value, (int, float)):
        if value <= 0:
            raise ValueError("must be > 0")
        return float(value)
    match = _DURATION.match(str(value).strip())
    if not match or not any(match.groups()):
        raise ValueError(f"must be a duration like 30s, 5m or 1h30m, got {value!r}")
    hours, minutes, seconds = (float(part) if part else 0.0 for part in match.groups())
    total = hours * 3600 + minutes * 60 + seconds
    if total <= 0:
        raise ValueError("must be > 0")
    return total


@dataclass
class TrafficClass:
    name: str
    users: int
    prompt_tokens: Any = 256
    followup_tokens: Any = None
    output_tokens: Any = 128
    turns: int = 1
    think_time: Any = 0.0
    wait_time: Any = 0.0


@dataclass
class Scenario:
    source: str
    name: str
    duration_s: float
    classes: list[TrafficClass]
    spawn_rate: float | None = None
    seed: int | None = None
    output: str | None = None
    server: dict[str, Any] = field(default_factory=dict)
    simulator: dict[str, Any] = field(default_factory=dict)
    slo: dict[str, Any] = field(default_factory=dict)
    description: str = ""

    @property
    def host(self) -> str | None:
        return self.server.get("host")

    @property
    def users(self) -> int:
        return sum(traffic.users for traffic in self.classes)


def load_scenario(path: Path, overrides: list[str] | None = None) -> Scenario:
    located = load_located(path)
    for override in overrides or []:
        _apply_override(located, override)
    return _validate(located)


def _apply_override(located: Located, override: str) -> None:
    """``key.path=value``; the value is parsed as YAML (``--set classes.chat.users=4``)."""
    key, sep, raw = override.partition("=")
    if not sep or not key:
        raise ScenarioError("--set", 1, 1, override, "expected key.path=value")
    value = parse_located(raw, f"--set {key}").data if raw.strip() else None
    target = located.data
    if not isinstance(target, dict):
        raise located.error("", "the scenario must be a mapping")
    parts = key.split(".")
    for part in parts[:-1]:
        target = target.setdefault(part, {})
        if not isinstance(target, dict):
            raise ScenarioError("--set", 1, 1, key, f"{part} is not a mapping")
    target[parts[-1]] = value


def _check_keys(located: Located, path: str, data: Any, allowed: set[str]) -> dict[str, Any]:
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise located.error(path, "must be a mapping")
    for key in data:
        if key not in allowed:
            child = f"{path}.{key}" if path else key
            raise located.error(child, f"unknown key; allowed: {', '.join(sorted(allowed))}")
    return data


def _number(located: Located, path: str, value: Any, *, integer: bool = False,
            minimum: float = 0, strict: bool = True) -> float:  # fmt: skip
    kinds = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds):
        raise located.error(path, f"must be {'an integer' if integer else 'a number'}")
    if value < minimum or (strict and value == minimum):
        raise located.error(path, f"must be {'>' if strict else '>='} {minimum:g}")
    return value


def _distribution(located: Located, path: str, value: Any) -> Any:
    try:
        parse_distribution(value)
    except DistributionError as error:
        raise located.error(f"{path}.{error.key}" if error.key else path, str(error)) from None
    return value


def _validate(located: Located) -> Scenario:
    data = _check_keys(located, "", located.data, TOP_KEYS)
    try:
        duration_s = parse_duration(data.get("duration", "60s"))
    except ValueError as error:
        raise located.error("duration", str(error)) from None
    server = _validate_server(located, data.get("server"))
    classes_data = data.get("classes")
    if not isinstance(classes_data, dict) or not classes_data:
        raise located.error(
            "classes", "needs at least one traffic class (a mapping of name -> class)"
        )
    classes = [_validate_class(located, name, spec) for name, spec in classes_data.items()]
    simulator = _check_keys(located, "simulator", data.get("simulator"), SIMULATOR_KEYS)
    for key in ("ttft_ms", "gap_ms", "natural_tokens"):
        if key in simulator:
            _distribution(located, f"simulator.{key}", simulator[key])
    spawn_rate = data.get("spawn_rate")
    if spawn_rate is not None:
        _number(located, "spawn_rate", spawn_rate)
    seed = data.get("seed")
    if seed is not None:
        _number(located, "seed", seed, integer=True, strict=False)
    slo = data.get("slo") or {}
    if not isinstance(slo, dict):
        raise located.error("slo", "must be a mapping")
    return Scenario(
        source=located.source,
        name=str(data.get("name") or Path(located.source).stem),
        description=str(data.get("description") or ""),
        duration_s=duration_s,
        classes=classes,
        spawn_rate=spawn_rate,
        seed=seed,
        output=data.get("output"),
        server=server,
        simulator=simulator,
        slo=slo,
    )


def _validate_server(located: Located, data: Any) -> dict[str, Any]:
    server = dict(_check_keys(located, "server", data, SERVER_KEYS))
    api = server.setdefault("api", "chat")
    if api not in ("chat", "completions"):
        raise located.error("server.api", "must be chat or completions")
    host = server.get("host")
    if host is not None and (not isinstance(host, str) or "://" not in host):
        raise located.error("server.host", "must be a URL like http://127.0.0.1:8000")
    key_env = server.get("api_key_env")
    if key_env is not None and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", str(key_env)):
        raise located.error(
            "server.api_key_env", "must be the NAME of an environment variable, not a key"
        )
    for flag in ("ignore_eos", "min_tokens", "include_usage"):
        if flag in server and not isinstance(server[flag], bool):
            raise located.error(f"server.{flag}", "must be true or false")
    for mapping in ("headers", "extra_body"):
        if mapping in server and not isinstance(server[mapping], dict):
            raise located.error(f"server.{mapping}", "must be a mapping")
    timeouts = _check_keys(located, "server.timeouts", server.get("timeouts"), TIMEOUT_KEYS)
    for key, value in timeouts.items():
        _number(located, f"server.timeouts.{key}", value)
    return server


def _validate_class(located: Located, name: str, data: Any) -> TrafficClass:
    path = f"classes.{name}"
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        raise located.error(path, "class names must be identifiers (letters, digits, _)")
    spec = _check_keys(located, path, data, CLASS_KEYS)
    if "users" not in spec:
        raise located.error(path, "users: is required")
    traffic = TrafficClass(name=name, users=int(_number(located, f"{path}.users", spec["users"],
                           integer=True, strict=False)))  # fmt: skip
    for key in ("prompt_tokens", "output_tokens", "followup_tokens"):
        if spec.get(key) is not None:
            setattr(traffic, key, _distribution(located, f"{path}.{key}", spec[key]))
    if "turns" in spec:
        traffic.turns = int(_number(located, f"{path}.turns", spec["turns"], integer=True))
    for key in ("think_time", "wait_time"):
        if key in spec:
            value = spec[key]
            if value != 0:
                _distribution(located, f"{path}.{key}", value)
            setattr(traffic, key, value)
    return traffic
