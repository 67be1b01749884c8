"""The scenario model is the one place a key is declared: the schema allows exactly its
keys, every key that sets a user-class attribute names one that exists, every simulator key
becomes a flag the simulator accepts."""

from __future__ import annotations

from pathlib import Path

import pytest

from tpot_locust.cli.embedded_simulator import simulator_args
from tpot_locust.harness.load.scenario_users import build_user_classes
from tpot_locust.harness.users.users import ChatUser
from tpot_locust.report.sweep_results import knee
from tpot_locust.scenario.model import (
    BurstSpec,
    Scenario,
    Server,
    Simulator,
    StageSpec,
    Sweep,
    Timeouts,
    TrafficClass,
    scenario_keys,
)
from tpot_locust.scenario.schema import CHECKS, validate
from tpot_locust.scenario.yaml_source import Located, ScenarioErrors
from tpot_locust.sim.cli import build_arg_parser

SECTIONS = (Scenario, Server, Timeouts, Simulator, TrafficClass, Sweep, StageSpec, BurstSpec)


@pytest.mark.parametrize("section", SECTIONS, ids=lambda s: s.__name__)
def test_every_key_has_a_check_and_every_user_attribute_exists(section: type) -> None:
    for name, meta in scenario_keys(section).items():
        assert meta["check"] in CHECKS or meta["check"] == "part", (name, meta["check"])
        if meta["user"]:
            assert hasattr(ChatUser, meta["user"]), (name, meta["user"])


def test_every_simulator_flag_is_one_the_simulator_takes() -> None:
    accepted = set(build_arg_parser()._option_string_actions)
    flags = [meta["flag"] for meta in scenario_keys(Simulator).values() if meta["flag"]]
    assert flags and set(flags) <= accepted


def _scenario(document: dict) -> object:
    return validate(Located(str(Path("x.yaml").resolve()), document, {}))


def test_a_document_sets_what_the_model_says() -> None:
    scenario = _scenario(
        {
            "seed": 3,
            "server": {"model": "m", "min_tokens": False, "timeouts": {"idle": 7}},
            "simulator": {"gap_ms": 2, "model": "sim"},
            "classes": {"chat": {"users": 2, "turns": 3, "output_tokens": 9}},
        }
    )
    (user_class,) = build_user_classes(scenario)
    settings = user_class.current_settings()  # held whole, made once from the scenario
    assert settings is user_class.settings and settings.seed == 3
    assert settings.request.model == "m" and settings.request.force_min_tokens is False
    assert settings.limits.idle == 7 and settings.turns.turns == 3
    assert settings.turns.output_tokens.sample(None) == 9  # a Fixed distribution, built once
    assert settings.limits.connect == ChatUser.connect_timeout  # not given: the default
    assert simulator_args(scenario) == ["--gap-ms", "2", "--seed", "3", "--model", "sim"]


def test_the_top_level_keys_come_from_the_model() -> None:
    scenario = _scenario(
        {
            "name": "n",
            "seed": 4,
            "spawn_rate": 2,
            "warmup": "5s",
            "duration": "20s",
            "classes": {"chat": {"users": 1}},
        }
    )
    assert (scenario.name, scenario.seed, scenario.spawn_rate) == ("n", 4, 2.0)
    assert (scenario.warmup_s, scenario.duration_s, scenario.description) == (5.0, 20.0, "")
    assert _scenario({"classes": {"chat": {"users": 1}}}).name == "x"  # the file's name
    with pytest.raises(ScenarioErrors) as raised:
        _scenario({"seed": -1, "spawn_rate": 0, "warmpu": 1, "classes": {"c": {"users": 1}}})
    text = str(raised.value)
    assert "seed: must be >= 0" in text and "spawn_rate: must be > 0" in text
    assert "warmpu: unknown key (did you mean warmup?)" in text


def test_an_unknown_key_is_refused_with_the_allowed_ones() -> None:
    with pytest.raises(ScenarioErrors) as raised:
        _scenario({"server": {"timeout": 3}, "classes": {"chat": {"users": 1, "turn": 2}}})
    text = str(raised.value)
    assert "server.timeout: unknown key (did you mean timeouts?)" in text
    assert "classes.chat.turn: unknown key (did you mean turns?)" in text


def test_a_sweep_doubles_up_to_its_limit_or_takes_its_values() -> None:
    doubling = _scenario(
        {
            "classes": {"chat": {"users": 1}},
            "sweep": {"start": 4, "limit": 40, "step_duration": "10s", "warmup": "2s"},
        }
    ).sweep
    assert doubling.class_name == "chat" and doubling.vary == "users"
    assert doubling.steps() == [4, 8, 16, 32] and doubling.step_duration == 10
    listed = _scenario(
        {
            "classes": {"chat": {"users": 1}, "arrivals": {"rate": 1}},
            "sweep": {"vary": "rate", "values": [0.5, 1, 2]},
        }
    ).sweep
    assert listed.class_name == "arrivals" and listed.steps() == [0.5, 1, 2]


@pytest.mark.parametrize(
    ("sweep", "message"),
    [
        ({"vary": "speed"}, "sweep.vary: must be one of users, rate, speedup"),
        ({"start": 4}, "sweep.start: needs limit"),
        ({"values": [4, 2]}, "sweep.values: must increase"),
        ({"values": [1], "start": 1, "limit": 2}, "needs values (a list) or start and limit"),
        ({"vary": "rate", "values": [1]}, "sweep: class: is required (which class's rate: none"),
        ({"class": "nope", "values": [1]}, "sweep.class: must name a class with users: chat"),
        ({"values": [1.5]}, "sweep.values: users must be whole numbers"),
        ({"value": [1]}, "sweep.value: unknown key (did you mean values?)"),
    ],
)
def test_a_bad_sweep_is_refused_by_key(sweep: dict, message: str) -> None:
    with pytest.raises(ScenarioErrors) as raised:
        _scenario({"classes": {"chat": {"users": 1}}, "sweep": sweep})
    assert message in str(raised.value)


def test_the_knee_is_the_last_pass_before_the_first_step_that_did_not() -> None:
    rows = [
        {"step": 1, "value": 4, "verdict": "pass"},
        {"step": 2, "value": 8, "verdict": "pass"},
        {"step": 3, "value": 16, "verdict": "fail"},
    ]
    assert knee(rows) == {"step": 2, "value": 8}
    assert knee(rows[2:]) is None
    assert knee([{"step": 1, "value": 4, "verdict": "invalid"}, *rows]) is None


def test_the_runs_overrides_reach_locust_whole_even_with_line_breaks() -> None:
    from tpot_locust.scenario.loader import overrides_for_env, overrides_from_env

    overrides = ["server.api=responses", "classes.chat.prompt_tokens={dist: fixed,\n value: 3}"]
    assert overrides_from_env(overrides_for_env(overrides)) == overrides
    assert overrides_from_env(None) == overrides_from_env("") == []
