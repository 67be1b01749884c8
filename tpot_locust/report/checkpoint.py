"""The run's merged state on disk as it goes: ``checkpoint.json``, what a killed process leaves.

A local runner, or a master, holds the run's totals in memory until its end writes
``histograms.json``; killed before (SIGKILL, the OOM killer, an evicted pod, a lost machine),
it took them all. Every report interval it now also writes them, with the run's facts as
they stand, to ``checkpoint.json`` (``histograms.json``'s shape, written whole via a
temporary file and a rename, so a reader never sees half of one). ``write_histograms``
removes it once the run's own results are saved; one left in a folder means the run died,
and ``report.recovery`` rebuilds from it.

Writing one costs the process ~6 ms for the quickstart (encoding, a compact JSON dump, the
write), more as the time series grows: the next is written no sooner than 50 times the last
one's cost (at most 2 % of the loop), so a long run checkpoints less often than every
interval. The dump goes in pieces with a yield between (``_dumps``): in one piece its ~5 ms
(the tail gaps' list, mostly) held a local run's loop each interval, a client stall each
time on the ``user`` clock.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from tpot_locust.common.cooperation import WorkSlices
from tpot_locust.common.results_files import write_file
from tpot_locust.common.results_folder import ResultsFolder
from tpot_locust.common.run_facts import RunFacts, json_default
from tpot_locust.metrics.metric_set import MetricSet
from tpot_locust.report.histograms_file import histograms_document
from tpot_locust.report.strict_json import write_json

logger = logging.getLogger(__name__)

COST_SHARE = 50  # the next checkpoint waits at least this many times the last one's cost
DUMP_DEPTH = 4  # dicts this deep are dumped key by key; deeper ones whole
LIST_CHUNK = 100  # a longer list is dumped this many items at a time


class Checkpoint:
    """Writes ``folder``'s ``checkpoint.json`` at most as often as its cost allows."""

    def __init__(self, folder: ResultsFolder) -> None:
        self.folder = folder
        self.written = 0  # checkpoints written, for tests and the log
        self.failed: str | None = None  # the last write's error (a full disk): not retried
        self._next_at = 0.0  # time.monotonic() before which none is written

    def save(self, totals: MetricSet, facts: Callable[[], RunFacts]) -> None:
        """Write the totals and facts now, unless the last one was too recent or failed."""
        started = time.monotonic()
        if self.failed is not None or started < self._next_at:
            return
        try:
            # cooperative: the totals change only in the tick that calls this, and a local
            # run's users stream in this loop meanwhile
            document = histograms_document(totals, _up_to_now(facts()), cooperative=True)
            _write(self.folder.checkpoint, document)
        except OSError as error:  # a full disk: the run goes on, its end says what was lost
            self.failed = str(error)
            logger.warning("tpot-locust: checkpoint.json could not be written: %s", error)
            return
        self.written += 1
        self._next_at = started + COST_SHARE * (time.monotonic() - started)


def _write(path: Path, document: dict[str, object]) -> None:
    """Compact (``write_json``'s walk for NaN and its indenting took ~35 ms of the loop); a
    NaN or infinity (``allow_nan=False`` finds it) goes the strict way, written as null."""
    try:
        text = _dumps(document, WorkSlices())
    except ValueError:
        write_json(path, document)
        return
    write_file(path, text + "\n")


def _plain(value: object) -> str:
    return json.dumps(value, separators=(",", ":"), allow_nan=False, default=json_default)


def _dumps(value: object, slices: WorkSlices, depth: int = 0) -> str:
    """``_plain(value)``, the same text, made in pieces with a yield between them."""
    if isinstance(value, dict) and depth < DUMP_DEPTH and all(isinstance(k, str) for k in value):
        parts = [f"{_plain(key)}:{_dumps(item, slices, depth + 1)}" for key, item in value.items()]
        return "{" + ",".join(parts) + "}"
    if isinstance(value, list) and len(value) > LIST_CHUNK:
        chunks = []
        for start in range(0, len(value), LIST_CHUNK):
            chunks.append(_plain(value[start : start + LIST_CHUNK])[1:-1])
            slices.after_item()
        return "[" + ",".join(chunks) + "]"
    text = _plain(value)
    slices.after_item()
    return text


def _up_to_now(facts: RunFacts) -> RunFacts:
    """The facts with the window ending now, if it was to end later: what a checkpoint
    holds is the window up to it (the truth check of a rebuilt run compares that)."""
    window = facts.window_wall_ns
    now_ns = time.time_ns()
    if window is None or len(window) != 2 or window[1] <= now_ns:
        return facts
    return replace(facts, window_wall_ns=[window[0], max(window[0], now_ns)])


__all__ = ["Checkpoint"]
