"""A class's traffic split over models or LoRA adapters (``classes.<name>.model``).

Deterministic, as Locust deals out user classes by weight: a smooth weighted round robin
(nginx's), so that in any run of picks each model's share is within one pick of its
weight's, and a 3:1 split arrives 3:1 at the server rather than about 3:1.
"""

from __future__ import annotations

from collections.abc import Mapping

MAX_SKIP = 100_000  # picks passed at the start, at most (a worker's index)


class ModelSplit:
    """Picks the model of each next conversation, by weight."""

    def __init__(self, weights: Mapping[str, float], skip: int = 0) -> None:
        """``skip``: picks to pass at the start (a worker's index, so that workers with few
        conversations each do not all begin on the heaviest model)."""
        if not weights or any(weight <= 0 for weight in weights.values()):
            raise ValueError("a model split needs at least one model, each weight > 0")
        self.weights = dict(weights)
        self._total = sum(self.weights.values())
        self._current = dict.fromkeys(self.weights, 0.0)
        for _ in range(min(skip, MAX_SKIP)):
            self.pick()

    def pick(self) -> str:
        current = self._current
        for name, weight in self.weights.items():
            current[name] += weight
        chosen = max(current, key=current.__getitem__)  # ties: the first listed
        current[chosen] -= self._total
        return chosen
