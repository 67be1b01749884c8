"""What a reader feels: each token against a reading pace's deadline (Etalon's fluidity).

A pace (``slo.pace``) gives every output token a deadline: the first ``ttft`` after the
send, each next one ``tpot`` after the one before. A token that arrives by its deadline is
on time; one that arrives later is late by that much (the reader waited), and the
deadlines after it start again from its arrival: one stall is counted once, not again for
every token behind it. Per request: the tokens on time, and the **stall time**, the sum of
the waits beyond the deadlines. Unlike request TPOT (an average over the whole answer),
a 200 ms pause in a fast stream is a stall here however fast the rest was.

With ``D_j`` the deadline of token ``j`` (1-based) and ``a_j`` its arrival, the rule
``D_1 = send + ttft``, ``D_j = (a_{j-1} if token j-1 was late else D_{j-1}) + tpot`` is
``D_j = j * tpot + max(D_1 - tpot, max over m < j of (a_m - m * tpot))``: a running maximum,
so a whole request is a few numpy calls.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np


class ReadingPace(Protocol):
    """A reading pace in ns (``scenario.slo.Pace``): the first token due ``ttft_ns`` after
    the send, each next one ``tpot_ns`` after the one before."""

    @property
    def ttft_ns(self) -> int: ...

    @property
    def tpot_ns(self) -> int: ...


def token_deadlines(
    pace: ReadingPace, send_ns: int, stamps_ns: np.ndarray, counts: np.ndarray | None
) -> tuple[int, int, int]:
    """``(tokens, late tokens, stall ns)`` of one request: event ``i`` arrived at
    ``stamps_ns[i]`` with ``counts[i]`` tokens (None: one each)."""
    arrivals = stamps_ns if counts is None else np.repeat(stamps_ns, counts)
    tokens = int(arrivals.size)
    if not tokens:
        return 0, 0, 0
    index = np.arange(1, tokens + 1, dtype=np.int64)
    first_deadline = send_ns + pace.ttft_ns
    behind = np.maximum.accumulate(arrivals - index * pace.tpot_ns)  # max over m <= j
    floor = np.empty(tokens, dtype=np.int64)
    floor[0] = first_deadline - pace.tpot_ns
    floor[1:] = np.maximum(first_deadline - pace.tpot_ns, behind[:-1])  # m < j
    deadlines = index * pace.tpot_ns + floor
    late = arrivals - deadlines
    missed = late > 0
    return tokens, int(np.count_nonzero(missed)), int(late[missed].sum())
