"""User classes built from a scenario: one ``ChatUser`` subclass per traffic class, each
holding its ``UserSettings`` whole (made once from the scenario: ``traffic_settings``) and
Locust's own attributes (its count or weight, its wait time)."""

from __future__ import annotations

from collections.abc import Callable

import gevent
from locust import LoadTestShape, User, between, constant

from tpot_locust.common.distributions import Fixed, Uniform
from tpot_locust.harness.users.user_settings import UserSettings
from tpot_locust.harness.users.users import ChatUser
from tpot_locust.scenario.model import Scenario, TrafficClass, scenario_keys
from tpot_locust.scenario.parsed_values import OrZero, ParsedDistribution


def _wait_time(spec: OrZero) -> Callable[[ChatUser], float]:
    """Locust's ``wait_time`` for a class's time between sessions (its own helpers where
    they fit, else a draw from the user's random stream)."""
    if not isinstance(spec, ParsedDistribution):
        return constant(0)  # 0: none
    distribution = spec.distribution
    if isinstance(distribution, Fixed):
        return constant(distribution.value)
    if isinstance(distribution, Uniform):
        return between(distribution.min, distribution.max)
    return lambda user: distribution.sample(user.rng)


def build_user_classes(scenario: Scenario) -> list[type[User]]:
    classes: list[type[User]] = [
        type(
            traffic.name,
            (ChatUser,),
            dict(locust_attributes(scenario, traffic), __module__=__name__),
        )
        for traffic in scenario.classes
    ]
    if scenario.stages and not scenario.max_users:
        classes.append(_idle_class())
    return classes


def retune_user_classes(scenario: Scenario, classes: dict[str, type]) -> None:
    """Set a reloaded scenario's settings on the classes built from it before (a test's own
    settings on a running session: Locust keeps the class objects); their users read them
    at their next use, as do subclasses that hold none of their own."""
    for traffic in scenario.classes:
        user_class = classes[traffic.name]
        for name, value in locust_attributes(scenario, traffic).items():
            setattr(user_class, name, value)


def locust_attributes(scenario: Scenario, traffic: TrafficClass) -> dict[str, object]:
    """A traffic class's user-class attributes: its settings whole, and what Locust reads
    (its count or weight, its wait time)."""
    attributes: dict[str, object] = {
        "settings": traffic_settings(scenario, traffic),
        "wait_time": _wait_time(traffic.wait_time),  # Locust's, from ours
    }
    if scenario.stages:  # a shape sets the total; closed classes share it by their users
        attributes["weight"] = traffic.users
        attributes["fixed_count"] = 0
    else:
        attributes["fixed_count"] = traffic.users
    return attributes


def traffic_settings(scenario: Scenario, traffic: TrafficClass) -> UserSettings:
    """A traffic class's settings: the keys that name a ``ChatUser`` attribute (``key``'s
    ``user``: the server's, its timeouts' and TLS's where given, the class's own) over
    ``ChatUser``'s defaults, parsed as a locustfile class's attributes are."""
    given: dict[str, object] = {"seed": scenario.seed, "api": scenario.server.api}
    for section in (scenario.server, scenario.server.timeouts, scenario.server.tls):
        for meta in scenario_keys(type(section)).values():
            value = getattr(section, meta["field"])
            if meta["user"] and value is not None:  # None: the class's default
                given[meta["user"]] = value
    for meta in scenario_keys(TrafficClass).values():
        if meta["user"]:  # the value as the schema's check parsed it
            given[meta["user"]] = getattr(traffic, meta["field"])
    return UserSettings.parse(lambda name: given.get(name, getattr(ChatUser, name)))


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
