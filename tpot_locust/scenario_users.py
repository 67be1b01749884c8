"""User classes built from a scenario: one ``ChatUser`` subclass per traffic class."""

from __future__ import annotations

from locust import between, constant

from tpot_locust.distributions import Fixed, Uniform, as_distribution
from tpot_locust.scenario import Scenario
from tpot_locust.users import ChatUser, CompletionsUser

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


def _wait_time(spec: object):
    if not spec:
        return constant(0)
    distribution = as_distribution(spec)
    if isinstance(distribution, Fixed):
        return constant(distribution.value)
    if isinstance(distribution, Uniform):
        return between(distribution.min, distribution.max)
    return lambda user: distribution.sample(user.rng)


def build_user_classes(scenario: Scenario) -> list[type[ChatUser]]:
    base = ChatUser if scenario.server.get("api", "chat") == "chat" else CompletionsUser
    attributes: dict[str, object] = {"seed": scenario.seed}
    for key, attribute in SERVER_ATTRIBUTES.items():
        if key in scenario.server:
            attributes[attribute] = scenario.server[key]
    for key, attribute in TIMEOUT_ATTRIBUTES.items():
        if key in scenario.server.get("timeouts", {}):
            attributes[attribute] = scenario.server["timeouts"][key]
    classes: list[type[ChatUser]] = []
    for traffic in scenario.classes:
        class_attributes = dict(
            attributes,
            __module__=__name__,
            fixed_count=traffic.users,
            prompt_tokens=traffic.prompt_tokens,
            followup_tokens=traffic.followup_tokens,
            output_tokens=traffic.output_tokens,
            turns=traffic.turns,
            think_time=traffic.think_time,
            wait_time=_wait_time(traffic.wait_time),
        )
        classes.append(type(traffic.name, (base,), class_attributes))
    return classes
