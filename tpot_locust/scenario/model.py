"""Scenario files: the model of a whole test, loaded and validated before anything starts.

``schema`` checks every key (unknown keys are errors, every error names file, line,
column and key path), ``loader`` reads a file with its ``--set`` overrides; this module
holds the validated model.
See ``scenarios/README.md`` for the language.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tpot_locust.scenario.slo import SloSpec
from tpot_locust.scenario.yaml_source import ScenarioError

__all__ = [
    "Burst",
    "Scenario",
    "ScenarioError",
    "Stage",
    "TrafficClass",
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
    trace: str | None = None  # open loop: a JSONL trace (scenario.trace), replayed as timed
    speedup: float = 1.0  # the trace's time scale: 2 replays it twice as fast
    trace_requests: list[Any] = field(default_factory=list, repr=False)  # the trace's lines

    @property
    def open_loop(self) -> bool:
        return self.rate is not None or self.trace is not None

    @property
    def replayed(self) -> bool:
        return self.trace is not None


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
