"""A user class's turn settings are parsed once into one frozen object (issue 56, item 4):
the turns draw what they drew when each turn parsed the class's attributes, a bad spec
fails where and as it failed, and a test's settings have a running class parsed anew."""

from __future__ import annotations

import dataclasses
import random

import pytest

from tests.conftest import ROOT
from tpot_locust.common.distributions import DistributionError, Normal, Uniform, parse_distribution
from tpot_locust.harness.load.scenario_in_use import ScenarioInUse
from tpot_locust.harness.load.scenario_users import build_user_classes
from tpot_locust.harness.users import turn_plans, user_settings
from tpot_locust.harness.users.turn_plans import TurnPlanner
from tpot_locust.harness.users.user_settings import Refused, TurnSettings
from tpot_locust.harness.users.users import ChatUser
from tpot_locust.scenario.loader import load_scenario


class Planned(ChatUser):
    abstract = True
    prompt_tokens = {"dist": "uniform", "min": 10, "max": 40}
    followup_tokens = Uniform(3, 9)  # a distribution built in code
    output_tokens = {"dist": "normal", "mean": 20, "stddev": 5}
    turns = 3
    think_time = {"dist": "exponential", "mean": 0.5}
    shared_prefix_tokens = 4
    shared_prefix_ratio = 0.5


def planner(user_class: type[ChatUser], seed: int = 7) -> TurnPlanner:
    """A user of ``user_class`` as planning sees it (no Locust environment, no wire)."""
    user = user_class.__new__(user_class)
    user.rng = random.Random(seed)
    return TurnPlanner(user)


@pytest.fixture
def sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    slept: list[float] = []
    monkeypatch.setattr(turn_plans.gevent, "sleep", slept.append)
    return slept


def test_turns_draw_what_they_drew_before(sleeps: list[float]) -> None:
    plan = planner(Planned)
    sessions = [list(plan.session_turns(None, None, None, None)) for _ in range(2)]
    # as drawn when each turn parsed the attributes (turn_plans at 8cd5d2c, seed 7)
    drawn = [[(turn.tokens, turn.max_tokens, turn.last) for turn in s] for s in sessions]
    assert drawn == [
        [(24, 23, False), (4, 17, False), (5, 16, True)],
        [(32, 22, False), (3, 22, False), (7, 16, True)],
    ]
    assert [round(s, 6) for s in sleeps] == [0.077891, 0.509319, 0.545549, 0.24371]
    assert plan.rng.random() == 0.24761483369691428  # the texts drew as much as before


def test_the_settings_are_parsed_once_per_class_and_frozen(
    sleeps: list[float], monkeypatch: pytest.MonkeyPatch
) -> None:
    parsed: list[object] = []

    def counted(spec: object) -> object:
        parsed.append(spec)
        return real(spec)

    real = user_settings.as_distribution
    monkeypatch.setattr(user_settings, "as_distribution", counted)

    class Once(Planned):
        abstract = True

    for seed in range(3):
        plan = planner(Once, seed)
        for _ in range(2):
            list(plan.session_turns(None, None, None, None))
            plan.max_tokens()
    assert len(parsed) == 4  # prompt, followup, output, think time: once, not each turn
    settings = planner(Once).settings
    assert settings is planner(Once).settings
    assert settings.prompt_tokens == Uniform(10, 40) and settings.followup_tokens == Uniform(3, 9)
    assert settings.output_tokens == Normal(20, 5) and settings.turns == 3
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.turns = 1
    assert dataclasses.fields(TurnSettings)  # a dataclass: what the class holds, typed


def test_a_bad_spec_fails_at_its_draw_with_the_same_error(sleeps: list[float]) -> None:
    class BadOutput(ChatUser):
        abstract = True
        output_tokens = "many"

    with pytest.raises(DistributionError) as parsing:
        parse_distribution("many")
    with pytest.raises(DistributionError) as planning:
        list(planner(BadOutput).session_turns(None, None, None, None))
    assert str(planning.value) == str(parsing.value)
    assert "must be a number or a distribution mapping" in str(planning.value)

    class BadFollowup(ChatUser):
        abstract = True
        followup_tokens = {"dist": "uniform", "min": 5}
        think_time = -1

    assert isinstance(planner(BadFollowup).settings.followup_tokens, Refused)
    assert len(list(planner(BadFollowup).session_turns(None, None, None, None))) == 1
    with pytest.raises(DistributionError, match="must be > 0"):  # the think time, first
        list(planner(BadFollowup).session_turns(None, None, None, 2))
    BadFollowup.think_time = 0
    user_settings.forget_class_settings(BadFollowup)
    with pytest.raises(DistributionError, match="is required") as missing:
        list(planner(BadFollowup).session_turns(None, None, None, 2))
    assert missing.value.key == "max"


def test_a_tests_settings_have_the_classes_parsed_anew() -> None:
    sweep = ROOT / "scenarios/sweep.yaml"
    scenario = load_scenario(sweep)
    classes = {cls.__name__: cls for cls in build_user_classes(scenario)}
    running = ScenarioInUse(scenario, classes, sweep)
    chat = classes["chat"]
    assert issubclass(chat, ChatUser)

    class Derived(chat):
        abstract = True

    plan, derived = planner(chat), planner(Derived)
    before = plan.settings
    assert plan.max_tokens() == 32 and derived.max_tokens() == 32
    assert running.use_settings(["classes.chat.output_tokens=16"])
    assert plan.max_tokens() == 16 and derived.max_tokens() == 16  # subclasses too
    assert plan.settings is not before and before.output_tokens.mean == 32
    assert running.use_settings([])
    assert plan.max_tokens() == 32
