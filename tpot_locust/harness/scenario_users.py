"""User classes built from a scenario: one ``ChatUser`` subclass per traffic class."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import gevent
from locust import LoadTestShape, User, between, constant

from tpot_locust.common.distributions import Fixed, Uniform, as_distribution
from tpot_locust.harness.users import ChatUser
from tpot_locust.scenario.datasets import load_dataset
from tpot_locust.scenario.model import Scenario, TrafficClass, scenario_keys


def _wait_time(spec: object, base_dir: Path) -> Callable[[ChatUser], float]:
    if not spec:
        return constant(0)
    distribution = as_distribution(spec, base_dir)
    if isinstance(distribution, Fixed):
        return constant(distribution.value)
    if isinstance(distribution, Uniform):
        return between(distribution.min, distribution.max)
    return lambda user: distribution.sample(user.rng)


def build_user_classes(scenario: Scenario) -> list[type[User]]:
    api = {"api": scenario.server.api}
    classes: list[type[User]] = [
        type(
            traffic.name,
            (ChatUser,),
            dict(class_attributes(scenario, traffic), **api, __module__=__name__),
        )
        for traffic in scenario.classes
    ]
    if scenario.stages and not scenario.max_users:
        classes.append(_idle_class())
    return classes


def retune_user_classes(scenario: Scenario, classes: dict[str, type]) -> None:
    """Set a reloaded scenario's values on the classes built from it before (a test's own
    settings on a running session: Locust keeps the class objects)."""
    for traffic in scenario.classes:
        for name, value in class_attributes(scenario, traffic).items():
            setattr(classes[traffic.name], name, value)


def class_attributes(scenario: Scenario, traffic: TrafficClass) -> dict[str, object]:
    """A traffic class's user-class attributes: the server's, its own, and its count."""
    attributes: dict[str, object] = {"seed": scenario.seed}
    for section in (scenario.server, scenario.server.timeouts, scenario.server.tls):
        for meta in scenario_keys(type(section)).values():
            value = getattr(section, meta["field"])
            if meta["user"] and value is not None:  # None: the class's default
                attributes[meta["user"]] = value
    for meta in scenario_keys(TrafficClass).values():
        if meta["user"]:
            build = _BUILD.get(meta["check"])
            value = getattr(traffic, meta["field"])
            attributes[meta["user"]] = build(value, scenario) if build else value
    if scenario.stages:  # a shape sets the total; closed classes share it by their users
        attributes["weight"] = traffic.users
        attributes["fixed_count"] = 0
    else:
        attributes["fixed_count"] = traffic.users
    return attributes


def _distribution(spec: object, scenario: Scenario) -> object:
    """Made once (an empirical file is read here, not per request)."""
    return None if spec is None else as_distribution(spec, scenario.base_dir)


def _time(spec: object, scenario: Scenario) -> object:
    return _distribution(spec, scenario) if spec else 0


# How a class key's value becomes its attribute, by the key's check (model.key).
_BUILD: dict[str, Callable[[Any, Scenario], object]] = {
    "dataset": lambda path, scenario: tuple(load_dataset(Path(path))) if path else (),
    "distribution": _distribution,
    "time": _time,
    "wait": lambda spec, scenario: _wait_time(spec, scenario.base_dir),
}


def _idle_class() -> type[User]:
    """Locust's shapes need a class with weight > 0 even when every class is open loop."""

    def idle(self: User) -> None:
        gevent.sleep(3600)

    attributes = {"__module__": __name__, "weight": 1, "wait_time": constant(0), "tasks": [idle]}
    return type("OpenLoopOnly", (User,), attributes)


def build_shape_class(scenario: Scenario) -> type[LoadTestShape] | None:
    """A Locust shape for ``stages``: total closed-loop users per stage; ends the run."""
    if not scenario.stages:
        return None
    spawn_rate = scenario.spawn_rate or max(scenario.max_users, 1)

    def tick(self: LoadTestShape) -> tuple[int, float] | None:
        elapsed, users = self.get_run_time(), scenario.users
        for stage in scenario.stages:
            if stage.users is not None:
                users = stage.users
            elapsed -= stage.duration_s
            if elapsed < 0:
                return users, spawn_rate
        return None

    return type("ScenarioStages", (LoadTestShape,), {"tick": tick, "__module__": __name__})
