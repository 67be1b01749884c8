"""The scenario this process runs, and the settings one test adds on top of it.

The scenario locustfile builds the user classes once, at import, and Locust keeps those
class objects for the whole session. A sweep over a running cluster changes one value per
test (``--tpot-set``, the web form's ``tpot_set``): the master reloads the scenario with
the test's settings at its start and hands them to every worker with its plan, and each
process updates its user classes in place, so the master's dispatcher and every worker's
traffic see the same step.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from tpot_locust.harness.load.scenario_users import retune_user_classes
from tpot_locust.metrics.phases import RunClock
from tpot_locust.scenario.loader import load_scenario
from tpot_locust.scenario.model import Scenario


@dataclass
class ScenarioInUse:
    scenario: Scenario
    classes: dict[str, type]
    path: Path | None = None  # the file, when a test's settings may reload it
    overrides: tuple[str, ...] = ()  # the run's own (TPOT_SET), under every test's settings
    settings: tuple[str, ...] = ()  # the current test's, on top

    def use_settings(self, settings: Iterable[str]) -> bool:
        """Reload the scenario with ``settings`` (the same as now: nothing to do). Returns
        whether anything changed; raises ``ScenarioError`` or ``ValueError`` for settings
        this session cannot take (the classes are Locust's now: none added or removed)."""
        settings = tuple(settings)
        if settings == self.settings:
            return False
        scenario = self.with_settings(settings)
        retune_user_classes(scenario, self.classes)
        self.scenario, self.settings = scenario, settings
        return True

    def run_clock(self, start_wall_ns: int) -> RunClock:
        """The run's timeline from ``start_wall_ns``: its warm-up, window and cool-down."""
        scenario = self.scenario
        return RunClock(start_wall_ns, scenario.duration_s, scenario.warmup_s, scenario.cooldown_s)

    def with_settings(self, settings: Iterable[str]) -> Scenario:
        """The scenario as a test with ``settings`` would run it, changing nothing: the web
        form's Start is refused with the reason before any test starts."""
        if self.path is None:
            raise ValueError("test settings (--tpot-set) need the scenario locustfile")
        scenario = load_scenario(self.path, [*self.overrides, *settings])
        names = [traffic.name for traffic in scenario.classes]
        before = [traffic.name for traffic in self.scenario.classes]
        if names != before:
            raise ValueError(
                f"test settings cannot change the classes ({', '.join(before)} -> "
                f"{', '.join(names)}): Locust built them at start"
            )
        if bool(scenario.stages) != bool(self.scenario.stages):
            raise ValueError("test settings cannot add or remove stages")
        return scenario


# The scenario locustfile's, set at its import: before Locust has made any Environment, so
# it has a home of its own; ``listeners`` hands it to the run it makes (None: a plain
# locustfile).
_in_use: ScenarioInUse | None = None


def use_scenario(
    scenario: Scenario,
    classes: dict[str, type],
    path: Path | None = None,
    overrides: Iterable[str] = (),
) -> None:
    """Called by the scenario locustfile: open-loop classes, bursts and phases come from it."""
    global _in_use
    _in_use = ScenarioInUse(scenario, classes, path, tuple(overrides))


def scenario_in_use() -> ScenarioInUse | None:
    """The scenario this process runs (None: a plain locustfile)."""
    return _in_use
