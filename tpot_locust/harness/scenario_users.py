"""User classes built from a scenario: one ``ChatUser`` subclass per traffic class."""

from __future__ import annotations

from pathlib import Path

import gevent
from locust import LoadTestShape, User, between, constant

from tpot_locust.common.distributions import Fixed, Uniform, as_distribution
from tpot_locust.harness.users import ChatUser, CompletionsUser
from tpot_locust.scenario.model import Scenario

SERVER_ATTRIBUTES = {
    "model": "model",
    "headers": "headers",
    "api_key_env": "api_key_env",
    "ignore_eos": "ignore_eos",
    "min_tokens": "force_min_tokens",
    "include_usage": "include_usage",
    "extra_body": "extra_body",
}
TIMEOUT_ATTRIBUTES = {
    "connect": "connect_timeout",
    "first_token": "first_token_timeout",
    "idle": "idle_timeout",
    "total": "total_timeout",
}


def _wait_time(spec: object, base_dir: Path):
    if not spec:
        return constant(0)
    distribution = as_distribution(spec, base_dir)
    if isinstance(distribution, Fixed):
        return constant(distribution.value)
    if isinstance(distribution, Uniform):
        return between(distribution.min, distribution.max)
    return lambda user: distribution.sample(user.rng)


def build_user_classes(scenario: Scenario) -> list[type[User]]:
    base = ChatUser if scenario.server.get("api", "chat") == "chat" else CompletionsUser
    attributes: dict[str, object] = {"seed": scenario.seed}
    for key, attribute in SERVER_ATTRIBUTES.items():
        if key in scenario.server:
            attributes[attribute] = scenario.server[key]
    for key, attribute in TIMEOUT_ATTRIBUTES.items():
        if key in scenario.server.get("timeouts", {}):
            attributes[attribute] = scenario.server["timeouts"][key]
    classes: list[type[User]] = []
    staged = bool(scenario.stages)
    for traffic in scenario.classes:

        def built(spec: object) -> object:
            """Distributions made once (an empirical file is read here, not per request)."""
            return None if spec is None else as_distribution(spec, scenario.base_dir)

        class_attributes = dict(
            attributes,
            __module__=__name__,
            prompt_tokens=built(traffic.prompt_tokens),
            followup_tokens=built(traffic.followup_tokens),
            output_tokens=built(traffic.output_tokens),
            turns=traffic.turns,
            think_time=built(traffic.think_time) if traffic.think_time else 0,
            wait_time=_wait_time(traffic.wait_time, scenario.base_dir),
            shared_prefix_tokens=traffic.shared_prefix_tokens,
            shared_prefix_ratio=traffic.shared_prefix_ratio,
        )
        if staged:  # a shape sets the total; closed classes share it by their users
            class_attributes["weight"] = traffic.users
            class_attributes["fixed_count"] = 0
        else:
            class_attributes["fixed_count"] = traffic.users
        classes.append(type(traffic.name, (base,), class_attributes))
    if staged and not scenario.max_users:
        classes.append(_idle_class())
    return classes


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
