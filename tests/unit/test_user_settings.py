"""A user class's settings are one typed, frozen object (issue 56, item 4): a scenario's
class holds it whole, made once from the scenario, and it is what a locustfile class with
the same attributes parses to; a test's settings replace it whole."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tpot_locust.harness.load.scenario_in_use import ScenarioInUse
from tpot_locust.harness.load.scenario_users import build_user_classes
from tpot_locust.harness.run.distributed import _differing_classes
from tpot_locust.harness.users import user_settings
from tpot_locust.harness.users.user_settings import (
    UserSettings,
    class_settings,
    settings_digest,
    settings_digests,
)
from tpot_locust.harness.users.users import ChatUser
from tpot_locust.scenario.loader import load_scenario
from tpot_locust.scenario.model import Scenario, Server, Timeouts, Tls, TrafficClass, scenario_keys
from tpot_locust.scenario.schema import validate
from tpot_locust.scenario.yaml_source import Located

# what Locust itself reads of a class: the rest of a scenario's class is its settings
LOCUST_ATTRIBUTES = {"settings", "wait_time", "fixed_count", "weight", "abstract", "tasks"}
LOCUST_ATTRIBUTES |= {"__module__", "__doc__"}
EVERY_KEY = {
    "seed": 11,
    "server": {
        "api": "completions",
        "model": "m",
        "headers": {"X-Team": "a"},
        "api_key_env": "MY_KEY",
        "ignore_eos": False,
        "min_tokens": False,
        "include_usage": False,
        "extra_body": {"temperature": 0.5},
        "max_event_bytes": 4096,
        "timeouts": {"connect": 3, "first_token": 4, "idle": 5, "total": 6},
        "tls": {"verify": False},
    },
    "classes": {
        "chat": {
            "users": 2,
            "prompt_tokens": {"dist": "uniform", "min": 10, "max": 20},
            "followup_tokens": 7,
            "output_tokens": 9,
            "turns": 3,
            "think_time": 2,
            "wait_time": 1,
            "shared_prefix_tokens": 5,
            "shared_prefix_ratio": 0.5,
            "model": {"a": 3, "b": 1},
        }
    },
}


def _scenario(document: dict[str, object]) -> Scenario:
    return validate(Located(str(Path("x.yaml").resolve()), document, {}))


def _as_locustfile_class(scenario: Scenario, traffic: TrafficClass) -> type[ChatUser]:
    """The class a user would write for ``traffic``: each key that names a ``ChatUser``
    attribute set as that attribute (what the scenario's classes were built as before)."""
    attributes: dict[str, object] = {"seed": scenario.seed, "api": scenario.server.api}
    for section in (scenario.server, scenario.server.timeouts, scenario.server.tls, traffic):
        for meta in scenario_keys(type(section)).values():
            value = getattr(section, meta["field"])
            if meta["user"] and value is not None:
                attributes[meta["user"]] = value
    return type("Written", (ChatUser,), {"abstract": True, **attributes})


def test_a_scenario_class_holds_its_settings_whole() -> None:
    scenario = _scenario(EVERY_KEY)
    (chat,) = build_user_classes(scenario)
    assert issubclass(chat, ChatUser) and set(vars(chat)) <= LOCUST_ATTRIBUTES
    settings = chat.current_settings()
    assert isinstance(settings, UserSettings) and settings is chat.settings
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.seed = 1  # type: ignore[misc]
    request, limits = settings.request, settings.limits
    assert (request.api, request.model, request.api_key_env) == ("completions", "m", "MY_KEY")
    assert request.headers == {"X-Team": "a"} and request.extra_body == {"temperature": 0.5}
    assert not (request.ignore_eos or request.force_min_tokens or request.include_usage)
    assert request.max_event_bytes == 4096 and request.model_split == {"a": 3.0, "b": 1.0}
    assert (limits.connect, limits.first_token, limits.idle, limits.total) == (3, 4, 5, 6)
    assert settings.tls_verify is False and settings.tls_ca is None and settings.seed == 11
    turns = settings.turns
    assert (turns.turns, turns.shared_prefix_tokens, turns.shared_prefix_ratio) == (3, 5, 0.5)
    assert turns.output_tokens.mean == 9 and turns.followup_tokens is not None
    assert turns.think_time is not None and turns.think_time.mean == 2
    assert settings.dataset == () and settings.dataset_order == "random"


@pytest.mark.parametrize("document", [EVERY_KEY, {"classes": {"chat": {"users": 1}}}])
def test_a_scenario_class_runs_as_the_locustfile_class_with_its_attributes(
    document: dict[str, object],
) -> None:
    scenario = _scenario(document)
    built_classes = [cls for cls in build_user_classes(scenario) if issubclass(cls, ChatUser)]
    for traffic, built in zip(scenario.classes, built_classes, strict=True):
        assert class_settings(_as_locustfile_class(scenario, traffic)) == built.current_settings()


@pytest.mark.parametrize("name", sorted(path.name for path in (ROOT / "scenarios").glob("*.yaml")))
def test_each_shipped_scenario_runs_as_its_attributes_would(name: str) -> None:
    scenario = load_scenario(ROOT / "scenarios" / name)
    built_classes = [cls for cls in build_user_classes(scenario) if issubclass(cls, ChatUser)]
    for traffic, built in zip(scenario.classes, built_classes, strict=True):
        assert class_settings(_as_locustfile_class(scenario, traffic)) == built.current_settings()


def test_a_dataset_class_holds_its_conversations(tmp_path: Path) -> None:
    (tmp_path / "p.jsonl").write_text('{"text": "hi there"}\n{"prompt": "yo"}\n')
    document = {"classes": {"chat": {"users": 1, "dataset": "p.jsonl"}}}
    document["classes"]["chat"]["dataset_order"] = "sequential"
    scenario = validate(Located(str(tmp_path / "x.yaml"), document, {}))
    (chat,) = build_user_classes(scenario)
    settings = chat.current_settings()
    assert len(settings.dataset) == 2 and settings.dataset_order == "sequential"
    assert class_settings(_as_locustfile_class(scenario, scenario.classes[0])) == settings


def test_the_parser_reads_every_attribute_a_scenario_key_names() -> None:
    read: list[str] = []

    def attribute(name: str) -> object:
        read.append(name)
        return getattr(ChatUser, name)

    assert UserSettings.parse(attribute) == class_settings(ChatUser)
    named = {
        meta["user"]
        for section in (Server, Timeouts, Tls, TrafficClass)
        for meta in scenario_keys(section).values()
        if meta["user"] and meta["user"] != "wait_time"  # Locust's own, not a setting
    }
    assert named <= set(read) and all(hasattr(ChatUser, name) for name in read)
    assert len(read) == len(set(read))  # each once


def test_a_tests_settings_replace_the_settings_whole() -> None:
    sweep = ROOT / "scenarios/sweep.yaml"
    scenario = load_scenario(sweep)
    classes = {cls.__name__: cls for cls in build_user_classes(scenario)}
    chat = classes["chat"]
    before = chat.current_settings()
    running = ScenarioInUse(scenario, classes, sweep)
    assert running.use_settings(["classes.chat.output_tokens=16", "server.timeouts.idle=9"])
    after = chat.current_settings()
    assert after is not before and before.turns.output_tokens.mean == 32
    assert after.turns.output_tokens.mean == 16 and after.limits.idle == 9
    assert after.request == before.request and set(vars(chat)) <= LOCUST_ATTRIBUTES


def test_a_digest_is_the_same_in_every_process_that_made_the_same_settings() -> None:
    code = (
        "from tpot_locust.harness.load.scenario_users import build_user_classes;"
        "from tpot_locust.harness.users.user_settings import settings_digests;"
        "from tpot_locust.scenario.loader import load_scenario;"
        "import sys; print(settings_digests(build_user_classes(load_scenario(sys.argv[1]))))"
    )
    scenario_path = ROOT / "scenarios/prefill-burst.yaml"
    here = settings_digests(build_user_classes(load_scenario(scenario_path)))
    there = subprocess.run(
        [sys.executable, "-c", code, str(scenario_path)],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    ).stdout
    assert here and str(here) == there.strip()  # another process: no address in the digest


def test_a_digest_changes_with_any_setting_and_never_holds_an_address() -> None:
    class Drawn:  # a distribution a locustfile built in code, with no repr of its own
        mean = 3.0

        def sample(self, rng: object) -> float:
            return 3.0

    class Mine(ChatUser):
        abstract = True
        output_tokens = Drawn()

    digest = settings_digest(Mine.current_settings())
    assert "0x" not in repr(user_settings._canonical(Mine.current_settings()))
    Mine.extra_body = {"temperature": 0.1}
    user_settings.forget_class_settings(Mine)
    assert settings_digest(Mine.current_settings()) != digest
    assert settings_digests([Mine, int]) == {"Mine": settings_digest(Mine.current_settings())}


def test_a_worker_names_the_classes_it_made_otherwise() -> None:
    scenario = _scenario(EVERY_KEY)
    classes = build_user_classes(scenario)
    masters = settings_digests(classes)
    assert _differing_classes(masters, classes) == []
    assert _differing_classes(None, classes) == []  # an older master sent none
    assert _differing_classes({"chat": "0" * 16, "other": "1"}, classes) == ["chat", "other"]
