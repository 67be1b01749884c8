"""A scenario's lengths and times in their parsed form, as the schema's check returns them.

Why: a key's value was checked (parsed, then dropped) by ``schema`` and parsed again by the
user classes, the capacity estimate and the bursts, each through its own table. Now the
check's parse is the value: an empirical file is read once per load, and every reader
(the user classes in every process, the capacity estimate, the simulator's flags) takes the
same one (issue 47, item 4).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from tpot_locust.common.distributions import Distribution, Fixed


@dataclass(frozen=True)
class ParsedDistribution:
    """A number or a ``{dist: ...}`` mapping: as written (``written``, which the
    simulator's flags repeat) and as parsed (``distribution``). A ``Distribution`` itself."""

    written: object
    distribution: Distribution = field(repr=False)

    def sample(self, rng: random.Random) -> float:
        return self.distribution.sample(rng)

    @property
    def mean(self) -> float:
        return self.distribution.mean


def fixed(value: int | float) -> ParsedDistribution:
    """A key's default: ``value`` every time."""
    return ParsedDistribution(value, Fixed(float(value)))


# A time or a length that may be 0 (none): 0, or what it is drawn from
OrZero = ParsedDistribution | float
