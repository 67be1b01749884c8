"""One process-wide value, made at its first use: the typed home of a true per-process
resource in a layer below the harness's context (``harness.users.process_context``).

A few things are one per process by nature: the packet tap (one kernel ring per process,
``wire.segment_stamps``), the batched reader (one timer in the event loop,
``wire.loop_reads``), the yield that aggregation uses (``common.cooperation``). The layers
that own them sit below any context the harness could pass in, and are reached from code
that Locust calls with nothing of ours (a socket's read), so each keeps its one value in a
``ProcessWide`` at module level, read through its module's getter.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class ProcessWide(Generic[T]):
    """A value made by ``make`` when first asked for, until ``replace`` puts another."""

    __slots__ = ("_make", "_made", "_value")

    def __init__(self, make: Callable[[], T]) -> None:
        self._make = make
        self._made = False
        self._value: T | None = None

    def get(self) -> T:
        if not self._made:
            self.replace(self._make())
        return self._value  # type: ignore[return-value]  # made: a T (which may be None)

    def replace(self, value: T) -> None:
        self._value, self._made = value, True
