"""Open-loop arrival times at staged rates (issue 43, item 2: a low-rate stage drew the next
arrival at its own rate and swallowed the stages after it)."""

from __future__ import annotations

import random

import pytest

from tpot_locust.scenario.arrivals import arrival_times
from tpot_locust.scenario.model import Stage


def staged(*stages: tuple[float, float]) -> list[Stage]:
    return [Stage(duration_s, None, {"o": rate}) for duration_s, rate in stages]


@pytest.mark.parametrize("kind", ["poisson", "gamma", "constant"])
@pytest.mark.parametrize("low", [0.01, 1e-300, 5e-324, 0.0])
def test_a_low_rate_stage_leaves_the_next_stage_its_rate(kind: str, low: float) -> None:
    stages = staged((1.0, low), (2.0, 5.0))
    times = list(arrival_times(kind, 1.0, 0.5, stages, "o", 3.0, random.Random(3)))
    later = [t for t in times if t >= 1.0]
    assert 4 <= len(later) <= 25, times  # ~10 at 5/s for 2 s (constant: exactly 10)
    assert all(t < 3.0 for t in times)


def test_equal_stages_send_what_their_rate_says() -> None:
    times = list(
        arrival_times(
            "constant", 1.0, 1.0, staged((1.0, 5.0), (2.0, 5.0)), "o", 3.0, random.Random(1)
        )
    )
    assert len(times) == 15 - 1  # every 0.2 s from 0.2 to 2.8 s (the last at 3.0 is not)
