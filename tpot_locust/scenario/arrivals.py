"""Open-loop arrival times: Poisson, gamma (burstiness) or constant, at a staged rate.

Times are absolute and drawn ahead of the clock, never from "now", so a slow server or a
busy client builds a queue (visible as schedule lag) instead of slowing the senders.
"""

from __future__ import annotations

import random
from collections.abc import Iterator

from tpot_locust.scenario.model import Stage


def rate_at(base_rate: float, stages: list[Stage], class_name: str, t_s: float) -> float:
    """The class's rate at run time ``t_s``: its stage's rate, else the class's own."""
    elapsed = 0.0
    for stage in stages:
        elapsed += stage.duration_s
        if t_s < elapsed:
            return stage.rates.get(class_name, base_rate)
    return base_rate


def next_stage_start(stages: list[Stage], t_s: float) -> float | None:
    elapsed = 0.0
    for stage in stages:
        elapsed += stage.duration_s
        if t_s < elapsed:
            return elapsed
    return None


def interarrival_s(kind: str, rate: float, burstiness: float, rng: random.Random) -> float:
    if kind == "constant":
        return 1.0 / rate
    if kind == "gamma":
        # vLLM's --burstiness: shape k, mean 1/rate; k = 1 is Poisson, k < 1 burstier.
        return rng.gammavariate(burstiness, 1.0 / (rate * burstiness))
    return rng.expovariate(rate)


def arrival_times(
    kind: str, base_rate: float, burstiness: float, stages: list[Stage], class_name: str,
    duration_s: float, rng: random.Random, scale: float = 1.0,
) -> Iterator[float]:  # fmt: skip
    """Seconds from the run start of each arrival, until ``duration_s``.

    ``scale`` is this process's share of the rate (1 / number of worker processes).
    """
    t_s = 0.0
    while t_s < duration_s:
        rate = rate_at(base_rate, stages, class_name, t_s) * scale
        if rate <= 0:
            upcoming = next_stage_start(stages, t_s)
            if upcoming is None:
                return
            t_s = upcoming
            continue
        t_s += interarrival_s(kind, rate, burstiness, rng)
        if t_s < duration_s:
            yield t_s
