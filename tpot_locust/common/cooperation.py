"""Yielding from long aggregation work so that streams get read in between.

This module holds only the policy (how often) and the hook; the yield itself comes from the
harness (``harness.watch.loop_yield``, installed by a process's run), so the metrics and report
layers never import gevent. Until a yield is installed (the CLI's supervisor, plain
scripts), aggregation runs through.

Why a yield must poll sockets and not merely switch greenlets: ``harness.watch.loop_yield``.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from tpot_locust.common.process_wide import ProcessWide

# Work between two yields of a ``WorkSlices`` loop: about a tenth of a fast decode step, so
# a stream's event waits at most this long behind aggregation (plus one item's work).
SLICE_NS = 200_000


def _run_through() -> None:
    """No event loop to yield to."""


# One per process: the yield of the process's event loop, once its run has one.
_YIELD: ProcessWide[Callable[[], None]] = ProcessWide(lambda: _run_through)


def use_yield(function: Callable[[], None]) -> None:
    """Install the function that lets streams be read (the harness: one poll of gevent's loop)."""
    _YIELD.replace(function)


def let_streams_run() -> None:
    """Pause this greenlet until the event loop has polled sockets once."""
    _YIELD.get()()


class WorkSlices:
    """Yields once per ``slice_ns`` of work in a loop whose items cost anywhere from
    microseconds to milliseconds: a fixed count per yield either yields far too often
    (cheap items, each yield is a loop iteration) or blocks for milliseconds (costly ones)."""

    __slots__ = ("_since_ns", "_slice_ns")

    def __init__(self, slice_ns: int = SLICE_NS) -> None:
        self._slice_ns = slice_ns
        self._since_ns = time.perf_counter_ns()

    def after_item(self) -> None:
        """Call after each item: yields when the slice is used up."""
        if time.perf_counter_ns() - self._since_ns >= self._slice_ns:
            let_streams_run()
            self._since_ns = time.perf_counter_ns()
