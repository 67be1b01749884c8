"""When each token of a response is due, behind a small interface.

The scheduler only asks a ``TimingModel`` for delays. This is the default mode (independent
gaps per stream); the continuous-batching engine (``--profile``: shared step times, prefill
cost by prompt length, KV cache) is a separate path, see ``engine.py`` and ``engine_loop.py``.
"""

from __future__ import annotations

import random
from typing import Protocol

from ..common.distributions import Distribution, Fixed, as_distribution
from .request import SimRequest


class TimingModel(Protocol):
    def first_token_delay_s(self, request: SimRequest) -> float:
        """Seconds from the request's arrival to its first token event."""
        ...

    def next_gap_s(self, request: SimRequest, index: int) -> float:
        """Seconds between token event ``index - 1`` and ``index`` (``index`` >= 1)."""
        ...


class GapModel:
    """Independent draws: TTFT from ``ttft_ms``, every inter-token gap from ``gap_ms``.

    Both are distributions (or specs) in milliseconds; one seeded RNG makes a run with the same
    request order reproducible.
    """

    def __init__(self, ttft_ms: object, gap_ms: object, seed: int = 0) -> None:
        self.ttft_ms: Distribution = as_distribution(ttft_ms)
        self.gap_ms: Distribution = as_distribution(gap_ms)
        self._rng = random.Random(seed)
        # Per-token hot path: a fixed gap needs no draw.
        self._fixed_gap_s = self.gap_ms.mean / 1000.0 if isinstance(self.gap_ms, Fixed) else None

    def first_token_delay_s(self, request: SimRequest) -> float:
        return max(0.0, self.ttft_ms.sample(self._rng)) / 1000.0

    def next_gap_s(self, request: SimRequest, index: int) -> float:
        if self._fixed_gap_s is not None:
            return self._fixed_gap_s
        return max(0.0, self.gap_ms.sample(self._rng)) / 1000.0
