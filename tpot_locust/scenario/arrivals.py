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


def unit_gap(kind: str, burstiness: float, rng: random.Random) -> float:
    """The next gap in mean gaps (at rate 1): Poisson's is exponential, gamma's (vLLM's
    --burstiness: shape k, mean 1; k = 1 is Poisson, k < 1 burstier) gamma, constant 1."""
    if kind == "constant":
        return 1.0
    if kind == "gamma":
        return rng.gammavariate(burstiness, 1.0 / burstiness)
    return rng.expovariate(1.0)


def arrival_times(
    kind: str,
    base_rate: float,
    burstiness: float,
    stages: list[Stage],
    class_name: str,
    duration_s: float,
    rng: random.Random,
    scale: float = 1.0,
) -> Iterator[float]:
    """Seconds from the run start of each arrival, until ``duration_s``.

    ``scale`` is this process's share of the rate (1 / number of worker processes). Each
    gap is drawn in mean gaps and spent through the stages at each one's rate (the
    integrated rate: Poisson's time rescaling), so a stage change takes effect at once:
    drawn at a 0.01/s stage's rate, one gap had swallowed the 5/s stage after it whole.
    """
    t_s = 0.0
    while t_s < duration_s:
        work = unit_gap(kind, burstiness, rng)
        while True:
            rate = rate_at(base_rate, stages, class_name, t_s) * scale
            upcoming = next_stage_start(stages, t_s)
            if rate > 0:
                need_s = work / rate  # infinite for a rate of 1e-300 or a denormal
                if upcoming is None or t_s + need_s < upcoming:
                    t_s += need_s
                    break
                work -= (upcoming - t_s) * rate
            elif upcoming is None:
                return
            t_s = upcoming
        if t_s < duration_s:
            yield t_s
