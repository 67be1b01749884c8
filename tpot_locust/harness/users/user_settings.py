"""A user class's settings as one frozen object (``UserSettings``): what its requests say,
how long they wait, its turns (``TurnSettings``: lengths and think time as distributions)
and its dataset.

Why: a scenario's traffic class was copied by name onto some 30 attributes of its user
class, each read raw where it was used (issue 56, item 4). Now a scenario's class holds
its settings whole (``ChatUser.settings``, made once from the scenario:
``harness.load.scenario_users``), and a class written in a locustfile keeps the attributes
its author sets, parsed into the same object at the class's first use
(``class_settings``). Both go through one parser, ``UserSettings.parse``; the lengths and
times are parsed there once, where each turn once parsed them again or took what looked
like a distribution for one.
"""

from __future__ import annotations

import dataclasses
import hashlib
import random
import weakref
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from tpot_locust.common.distributions import (
    Distribution,
    DistributionError,
    DistributionSpec,
    as_distribution,
)
from tpot_locust.scenario.datasets import Conversation

# a locustfile class's settings, parsed at its first use (weak: a class made for a test goes)
_PARSED: weakref.WeakKeyDictionary[type, UserSettings] = weakref.WeakKeyDictionary()


@dataclass(frozen=True)
class Refused:
    """A length or time that does not parse, kept as its error: a draw from it raises it,
    where the draw raised it when each turn parsed the attribute (a class whose
    ``followup_tokens`` is wrong still runs its one-turn sessions)."""

    error: DistributionError

    def sample(self, rng: random.Random) -> float:
        raise DistributionError(str(self.error), self.error.key)

    @property
    def mean(self) -> float:
        raise DistributionError(str(self.error), self.error.key)


@dataclass(frozen=True)
class TurnSettings:
    """What a class's turns are drawn from, parsed once."""

    prompt_tokens: Distribution  # the first turn's new user message
    followup_tokens: Distribution | None  # later turns'; None: prompt_tokens
    output_tokens: Distribution  # each turn's max_tokens
    turns: int
    think_time: Distribution | None  # seconds between two turns; None: no pause at all
    shared_prefix_tokens: int  # the same leading text in sessions (prefix caching)
    shared_prefix_ratio: float  # the share of sessions that begin with it
    tokenizer: str | None  # a local tokenizer: prompts of exact token counts

    @classmethod
    def parse(cls, attribute: Callable[[str], Any]) -> TurnSettings:
        """From a user class's attributes, each read by its name (``ChatUser``'s)."""
        followup, think_time = attribute("followup_tokens"), attribute("think_time")
        return cls(
            prompt_tokens=_parsed(attribute("prompt_tokens")),
            followup_tokens=None if followup is None else _parsed(followup),
            output_tokens=_parsed(attribute("output_tokens")),
            turns=attribute("turns"),
            # a false value (0, the default) is no pause, as it always was: never parsed
            think_time=_parsed(think_time) if think_time else None,
            shared_prefix_tokens=attribute("shared_prefix_tokens"),
            shared_prefix_ratio=attribute("shared_prefix_ratio"),
            tokenizer=attribute("tokenizer"),
        )


@dataclass(frozen=True)
class RequestSettings:
    """What a class's requests say: the API, the model, the body's options, the headers."""

    api: str  # one of ``tpot_locust.apis.API_NAMES``
    model: str | None  # None: the first model the API's models list names
    model_split: Mapping[str, float] | None  # models by weight, one per conversation
    ignore_eos: bool
    force_min_tokens: bool  # min_tokens = max_tokens (vLLM, SGLang)
    include_usage: bool  # stream_options.include_usage
    extra_body: Mapping[str, Any]  # merged over the API's body
    headers: Mapping[str, str]  # over the API's own
    api_key_env: str | None  # the environment variable that holds the key
    request_name: str | None  # the name in Locust's stats; None: the path
    max_event_bytes: int  # a larger event (or NDJSON line) fails its request


@dataclass(frozen=True)
class WaitLimits:
    """Seconds a request waits: to connect, for its first token, between two reads, in
    all (docs/metrics.md names what each clock starts and stops on)."""

    connect: float
    first_token: float
    idle: float
    total: float


@dataclass(frozen=True)
class UserSettings:
    """Everything a user class's sessions are made from, parsed once."""

    request: RequestSettings
    limits: WaitLimits
    tls_ca: str | None  # https: trust this CA file (PEM), not the system's
    tls_verify: bool  # https: False accepts any certificate
    turns: TurnSettings
    seed: int | None  # None: each user's random stream unseeded
    dataset: tuple[Conversation, ...]  # sessions from a file (empty: synthetic)
    dataset_order: str  # "random" or "sequential"

    @classmethod
    def parse(cls, attribute: Callable[[str], Any]) -> UserSettings:
        """From a user class's attributes, each read by its name (``ChatUser``'s): the
        one way settings are made, from a locustfile's class or from a scenario."""
        split = attribute("model_split")
        return cls(
            request=RequestSettings(
                api=attribute("api"),
                model=attribute("model"),
                model_split=None if split is None else dict(split),
                ignore_eos=attribute("ignore_eos"),
                force_min_tokens=attribute("force_min_tokens"),
                include_usage=attribute("include_usage"),
                extra_body=dict(attribute("extra_body") or {}),
                headers=dict(attribute("headers") or {}),
                api_key_env=attribute("api_key_env"),
                request_name=attribute("request_name"),
                max_event_bytes=attribute("max_event_bytes"),
            ),
            limits=WaitLimits(
                connect=attribute("connect_timeout"),
                first_token=attribute("first_token_timeout"),
                idle=attribute("idle_timeout"),
                total=attribute("total_timeout"),
            ),
            tls_ca=attribute("tls_ca"),
            tls_verify=attribute("tls_verify"),
            turns=TurnSettings.parse(attribute),
            seed=attribute("seed"),
            dataset=tuple(attribute("dataset")),
            dataset_order=attribute("dataset_order"),
        )


def class_settings(user_class: type) -> UserSettings:
    """``user_class``'s settings parsed from its attributes, at the class's first use."""
    settings = _PARSED.get(user_class)
    if settings is None:
        settings = _PARSED[user_class] = UserSettings.parse(lambda name: getattr(user_class, name))
    return settings


def settings_digests(user_classes: Iterable[type]) -> dict[str, str]:
    """Each user class's settings as a short digest, by class name: what a master hands its
    workers with each test's plan, so that a worker whose own settings differ (another
    scenario file or locustfile on that machine) stops the run at its start, named."""
    digests = {}
    for user_class in user_classes:
        current = getattr(user_class, "current_settings", None)  # a ChatUser's (not Locust's)
        if callable(current):
            digests[user_class.__name__] = settings_digest(current())
    return digests


def settings_digest(settings: UserSettings) -> str:
    """The same in every process that made the same settings (no object's address in it)."""
    return hashlib.sha256(repr(_canonical(settings)).encode()).hexdigest()[:16]


def _canonical(value: object) -> object:
    """``value`` as plain data: a dataclass (a distribution, a turn) by its type and fields,
    containers by their items; an object of any other type by its type's name only."""
    if value is None or isinstance(value, bool | int | float | str | bytes):
        return value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = dataclasses.fields(value)
        return (type(value).__name__, *(_canonical(getattr(value, f.name)) for f in fields))
    if isinstance(value, Mapping):
        return tuple((_canonical(key), _canonical(item)) for key, item in value.items())
    if isinstance(value, list | tuple):
        return tuple(_canonical(item) for item in value)
    if isinstance(value, BaseException):
        return (type(value).__name__, str(value))
    return type(value).__qualname__


def forget_class_settings(user_class: type) -> None:
    """``user_class``'s attributes were set anew: its settings, and its subclasses', are
    parsed again at their next use."""
    for cached in list(_PARSED):
        if issubclass(cached, user_class):
            _PARSED.pop(cached, None)


def _parsed(spec: DistributionSpec) -> Distribution:
    """``spec`` as a distribution (one already, or parsed); one that does not parse is kept
    as its error (``Refused``)."""
    try:
        return as_distribution(spec)
    except DistributionError as error:
        return Refused(error)
