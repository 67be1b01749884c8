"""What ``tpot-locust run`` is given: its options, and the scenario they select, read once
and loaded with every override (``--set``, ``--users``, ``--run-time``, ``--stop-timeout``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from tpot_locust.cli.locust_command import headless_options
from tpot_locust.scenario.loader import ScenarioText
from tpot_locust.scenario.model import Scenario
from tpot_locust.sim.profiles import check_engine


@dataclass
class RunOptions:
    scenario_path: Path
    host: str | None = None
    users: int | None = None
    spawn_rate: float | None = None
    run_time: str | None = None
    stop_timeout: str | None = None
    out: Path | None = None
    workers: int = 0
    overrides: list[str] = field(default_factory=list)
    locust_args: list[str] = field(default_factory=list)
    truth_tolerance_ms: float | None = None
    sweep_step: bool = False  # a step of ``tpot-locust sweep``: its verdict is the sweep's
    full_report: bool = (
        False  # ``--report full``: every table in the terminal, not the first screen
    )
    web_port: int | None = None  # ``--web``: the web UI's port on 127.0.0.1; None: headless


def _overrides(options: RunOptions, scenario: Scenario) -> dict[str, str]:
    """Every override, with the option it came from (named in its errors)."""
    overrides = {override: f"--set {override}" for override in options.overrides}
    if options.users is not None:
        if len(scenario.classes) != 1:
            names = ", ".join(c.name for c in scenario.classes)
            raise ValueError(
                f"--users needs a single-class scenario; use --set classes.NAME.users=N ({names})"
            )
        overrides[f"classes.{scenario.classes[0].name}.users={options.users}"] = (
            f"--users {options.users}"
        )
    if options.run_time is not None:
        overrides[f"duration={options.run_time}"] = f"--run-time {options.run_time}"
    if options.stop_timeout is not None:
        overrides[f"stop_timeout={options.stop_timeout}"] = f"--stop-timeout {options.stop_timeout}"
    return overrides


def load_run_scenario(options: RunOptions) -> tuple[ScenarioText, Scenario, list[str]]:
    """The scenario file as read (once, by this process), the scenario loaded with every
    override and ``--spawn-rate``, and the overrides as run. A run time Locust cannot run
    or a spawn rate <= 0 is refused here, before anything starts."""
    source = ScenarioText(options.scenario_path)  # read once by this process
    scenario = source.load(options.overrides, check_engine=check_engine)
    labelled = _overrides(options, scenario)
    overrides = list(labelled)
    if overrides != list(options.overrides):  # --users or --run-time: load with them too
        scenario = source.load(overrides, labelled, check_engine)
    headless_options(scenario)  # a run time Locust cannot run is refused before anything
    if options.spawn_rate is not None:
        if options.spawn_rate <= 0:
            raise ValueError(f"--spawn-rate {options.spawn_rate:g}: must be > 0")
        scenario.spawn_rate = options.spawn_rate
    return source, scenario, overrides
