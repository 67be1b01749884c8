"""A test's own settings (``--tpot-set``, a sweep step on a running cluster) retune the user
classes Locust already holds, and refuse what those classes cannot become."""

from __future__ import annotations

import pytest

from tests.conftest import ROOT
from tpot_locust.harness.load.scenario_in_use import ScenarioInUse
from tpot_locust.harness.load.scenario_users import build_user_classes
from tpot_locust.scenario.loader import ScenarioError, load_scenario, split_settings

SWEEP = ROOT / "scenarios/sweep.yaml"


def in_use(path=SWEEP) -> ScenarioInUse:
    scenario = load_scenario(SWEEP)
    classes = {cls.__name__: cls for cls in build_user_classes(scenario)}
    return ScenarioInUse(scenario, classes, path, ("seed=7",))


def test_settings_reload_the_scenario_and_retune_the_classes_in_place() -> None:
    running = in_use()
    chat = running.classes["chat"]
    assert chat.fixed_count == 4
    assert running.use_settings(["classes.chat.users=32", "classes.chat.output_tokens=16"])
    assert running.classes["chat"] is chat  # the class Locust holds, changed
    assert chat.fixed_count == 32 and running.scenario.users == 32
    assert running.scenario.seed == 7  # the run's own overrides stay under the test's
    assert not running.use_settings(["classes.chat.users=32", "classes.chat.output_tokens=16"])
    assert running.use_settings([])  # back to the scenario as started
    assert chat.fixed_count == 4


def test_settings_that_would_change_the_classes_are_refused() -> None:
    running = in_use()
    with pytest.raises(ValueError, match="cannot change the classes"):
        running.use_settings(["classes.extra.users=2"])
    with pytest.raises(ScenarioError):
        running.use_settings(["classes.chat.users=-1"])
    assert running.classes["chat"].fixed_count == 4 and running.settings == ()
    with pytest.raises(ValueError, match="scenario locustfile"):
        in_use(path=None).use_settings(["classes.chat.users=8"])


def test_the_settings_field_holds_one_override_per_line() -> None:
    assert split_settings(" a=1\n\nb.c=2 \n") == ["a=1", "b.c=2"]
    assert split_settings(None) == []
