"""LoRA adapters on the simulated GPU: which may join a step's batch, and what loading one
costs, so that traffic split over adapters shows in the tail as it does on vLLM.

vLLM's rule (``--max-loras``, default 1): one batch holds requests of at most ``max_loras``
distinct adapters (the base model's requests are always welcome); a waiting request of
another adapter is passed over, and later ones may go first. An adapter runs from one of
``max_loras`` GPU slots; one not in a slot is loaded into the least recently used slot that
no running request needs, and the step that loads it is ``adapter_load_ms`` longer.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable


class AdapterSlots:
    """The GPU's adapter slots, least recently used first."""

    def __init__(self, max_loras: int, load_ns: int) -> None:
        self.max_loras = max_loras
        self.load_ns = load_ns
        self._slots: OrderedDict[str, None] = OrderedDict()
        self.loads = 0  # adapters loaded so far

    @staticmethod
    def in_batch(adapters: Iterable[str | None]) -> set[str]:
        """The distinct adapters of a batch's requests (the base model's are None)."""
        return {adapter for adapter in adapters if adapter is not None}

    def admits(self, adapter: str | None, batch: set[str]) -> bool:
        """Whether a request of ``adapter`` may join a batch already using ``batch``."""
        return adapter is None or adapter in batch or len(batch) < self.max_loras

    def activate(self, adapter: str | None, batch: set[str]) -> int:
        """Put ``adapter`` in a slot for a step whose batch uses ``batch`` (it included);
        returns the load time this adds to the step (0 when it was in a slot)."""
        if adapter is None:
            return 0
        if adapter in self._slots:
            self._slots.move_to_end(adapter)
            return 0
        if len(self._slots) >= self.max_loras:
            idle = next(name for name in self._slots if name not in batch)
            del self._slots[idle]
        self._slots[adapter] = None
        self.loads += 1
        return self.load_ns
