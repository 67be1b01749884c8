"""The deadlines of a pace, vectorised (``metrics.fluidity``), against the definition
applied one token at a time."""

from __future__ import annotations

import random

import numpy as np

from tpot_locust.metrics.fluidity import token_deadlines
from tpot_locust.scenario.slo import Pace


def one_at_a_time(pace: Pace, send: int, arrivals: list[int]) -> tuple[int, int, int]:
    late = stall = 0
    deadline = send + pace.ttft_ns
    for arrival in arrivals:
        if arrival > deadline:
            late, stall, deadline = late + 1, stall + arrival - deadline, arrival
        deadline += pace.tpot_ns
    return len(arrivals), late, stall


def test_the_running_maximum_is_the_definition() -> None:
    rng = random.Random(7)
    for _ in range(500):
        pace = Pace(rng.randint(1, 500), rng.randint(1, 50))
        send, stamps, counts = rng.randint(0, 1000), [], []
        at = send
        for _ in range(rng.randint(0, 40)):
            at += rng.choice((0, 1, 5, 20, 60, 300))
            stamps.append(at)
            counts.append(rng.choice((1, 1, 1, 2, 4)))
        arrivals = [
            stamp for stamp, count in zip(stamps, counts, strict=True) for _ in range(count)
        ]
        got = token_deadlines(pace, send, np.array(stamps, np.int64), np.array(counts, np.int64))
        assert got == one_at_a_time(pace, send, arrivals)


def test_a_stall_is_counted_once_and_the_tokens_behind_it_are_on_time() -> None:
    pace = Pace(ttft_ns=100, tpot_ns=10)
    assert token_deadlines(pace, 0, np.array([100, 110, 320, 330, 340]), None) == (5, 1, 200)
    assert token_deadlines(pace, 0, np.array([150, 160, 170]), None) == (3, 1, 50)
    assert token_deadlines(pace, 0, np.array([], np.int64), None) == (0, 0, 0)
