"""Scenario files: the model of a whole test, loaded and validated before anything starts.

``scenario_schema`` checks every key (unknown keys are errors, every error names file,
line, column and key path); this module holds the validated model and ``--set`` overrides.
See ``scenarios/README.md`` for the language.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tpot_locust.slo import SloSpec
from tpot_locust.yaml_source import Located, ScenarioError, load_located, parse_located

__all__ = [
    "Burst",
    "Scenario",
    "ScenarioError",
    "Stage",
    "TrafficClass",
    "load_scenario",
]


@dataclass
class TrafficClass:
    name: str
    users: int = 0  # closed loop: concurrent sessions
    rate: float | None = None  # open loop: sessions started per second (whole run)
    arrival: str = "poisson"  # poisson | gamma | constant
    burstiness: float = 1.0  # gamma shape: 1 = Poisson, < 1 burstier, > 1 more even
    max_in_flight: int = 256
    prompt_tokens: Any = 256
    followup_tokens: Any = None
    output_tokens: Any = 128
    turns: int = 1
    think_time: Any = 0.0
    wait_time: Any = 0.0
    shared_prefix_tokens: int = 0
    shared_prefix_ratio: float = 1.0

    @property
    def open_loop(self) -> bool:
        return self.rate is not None


@dataclass(frozen=True)
class Stage:
    duration_s: float
    users: int | None  # total closed-loop users during the stage
    rates: dict[str, float]  # open-loop class -> sessions per second during the stage


@dataclass(frozen=True)
class Burst:
    """``count`` requests of ``class_name`` sent together at each time in ``times_s``."""

    class_name: str
    count: int
    times_s: tuple[float, ...]
    prompt_tokens: Any = None
    output_tokens: Any = None


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
    slo: SloSpec = field(default_factory=SloSpec)
    description: str = ""
    stages: list[Stage] = field(default_factory=list)
    bursts: list[Burst] = field(default_factory=list)
    warmup_s: float = 0.0
    cooldown_s: float = 0.0

    @property
    def base_dir(self) -> Path:
        return Path(self.source).parent

    @property
    def host(self) -> str | None:
        return self.server.get("host")

    @property
    def users(self) -> int:
        """Closed-loop users at the start (what Locust spawns without stages)."""
        return sum(traffic.users for traffic in self.classes)

    @property
    def max_users(self) -> int:
        stage_users = [stage.users for stage in self.stages if stage.users is not None]
        return max([self.users, *stage_users])

    def traffic_class(self, name: str) -> TrafficClass:
        return next(traffic for traffic in self.classes if traffic.name == name)


def load_scenario(
    path: Path, overrides: list[str] | None = None, labels: dict[str, str] | None = None
) -> Scenario:
    """``labels``: the option each override came from (``--users -1``), named in its
    errors; other overrides are named as ``--set key=value``."""
    from tpot_locust.scenario_schema import validate

    located = load_located(path)
    for override in overrides or []:
        label = (labels or {}).get(override, f"--set {override}")
        _apply_override(located, override, label)
    return validate(located)


def _apply_override(located: Located, override: str, label: str) -> None:
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
    located.overridden[key] = label
