"""A user class's settings of its turns, parsed once: its lengths and think time as
distributions, its turn count, shared prefix and tokenizer (``TurnSettings``).

Why: a class's attributes were read raw at every turn and parsed there, or taken as a
distribution when they looked like one (issue 56, item 4). A class's attributes stay what
its author writes (a number, a ``{"dist": ...}`` mapping, a ``Distribution``; a scenario's
classes: the values its schema parsed); ``turn_settings`` parses them at the class's first
use, into one frozen object the turns read, and a test's settings (``retune_user_classes``)
have them parsed anew (``forget_turn_settings``).
"""

from __future__ import annotations

import random
import weakref
from dataclasses import dataclass
from typing import Protocol

from tpot_locust.common.distributions import (
    Distribution,
    DistributionError,
    DistributionSpec,
    as_distribution,
)

# each user class's settings, parsed at its first use (weak: a class made for a test goes)
_SETTINGS: weakref.WeakKeyDictionary[type, TurnSettings] = weakref.WeakKeyDictionary()


class TurnAttributes(Protocol):
    """The attributes of a user (its class's: ``ChatUser``'s) its turns are planned from."""

    @property
    def prompt_tokens(self) -> DistributionSpec: ...
    @property
    def followup_tokens(self) -> DistributionSpec | None: ...
    @property
    def output_tokens(self) -> DistributionSpec: ...
    @property
    def turns(self) -> int: ...
    @property
    def think_time(self) -> DistributionSpec: ...
    @property
    def shared_prefix_tokens(self) -> int: ...
    @property
    def shared_prefix_ratio(self) -> float: ...
    @property
    def tokenizer(self) -> str | None: ...


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
    def parse(cls, user: TurnAttributes) -> TurnSettings:
        followup, think_time = user.followup_tokens, user.think_time
        return cls(
            prompt_tokens=_parsed(user.prompt_tokens),
            followup_tokens=None if followup is None else _parsed(followup),
            output_tokens=_parsed(user.output_tokens),
            turns=user.turns,
            # a false value (0, the default) is no pause, as it always was: never parsed
            think_time=_parsed(think_time) if think_time else None,
            shared_prefix_tokens=user.shared_prefix_tokens,
            shared_prefix_ratio=user.shared_prefix_ratio,
            tokenizer=user.tokenizer,
        )


def _parsed(spec: DistributionSpec) -> Distribution:
    """``spec`` as a distribution (one already, or parsed); one that does not parse is kept
    as its error (``Refused``)."""
    try:
        return as_distribution(spec)
    except DistributionError as error:
        return Refused(error)


def turn_settings(user: TurnAttributes) -> TurnSettings:
    """``user``'s class's settings, parsed from its attributes at the class's first use."""
    user_class = type(user)
    settings = _SETTINGS.get(user_class)
    if settings is None:
        settings = _SETTINGS[user_class] = TurnSettings.parse(user)
    return settings


def forget_turn_settings(user_class: type) -> None:
    """``user_class``'s attributes were set anew (a test's settings): its settings, and
    those of its subclasses, are parsed again at their next use."""
    for cached in list(_SETTINGS):
        if issubclass(cached, user_class):
            _SETTINGS.pop(cached, None)
