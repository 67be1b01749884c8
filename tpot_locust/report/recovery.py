"""A results folder the Locust master's death left, finished from what survived.

The master holds the merged totals of a distributed run; killed (OOM, an evicted pod,
SIGKILL), it takes them with it and writes no ``histograms.json``. Each worker keeps what it
recorded: stopped (``cli.processes``: as soon as the master is gone; or by its own
SIGTERM), it writes ``workers/<id>.json``, every delta of its test including the last one
(``harness.distributed.WorkerLink.write_audit``). Every token gap is recorded by exactly one
worker, so their totals added are the run's: nothing counted twice, nothing that reached a
surviving worker lost. What died with the master: its time series and server samples, and
the figures of a worker that died with it.

The facts are marked ``complete: false``, with ``recovered`` saying from what; the window is
the workers' own (the earliest start to the latest end).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tpot_locust.common.results_folder import ResultsFolder
from tpot_locust.common.run_facts import RunFacts
from tpot_locust.metrics.histograms import HistogramDecodeError
from tpot_locust.metrics.metric_set import MetricSet
from tpot_locust.report.saved_results import (
    WORKER_AUDIT,
    ResultsError,
    read_checked,
    refuse_too_many_histograms,
)

MAX_AUDITS = 10_000  # as many workers as a run has (``RunFacts.process_windows_wall_ns``)


def recovered_results(folder: ResultsFolder, scenario: str | None) -> tuple[MetricSet, RunFacts]:
    """The run's totals from its workers' records, and its facts as far as they tell;
    ``FileNotFoundError`` where the folder has none, ``ResultsError`` for a damaged one."""
    found = folder.workers.glob("*.json") if folder.workers.is_dir() else []
    audits = sorted(path for path in found if not path.is_symlink())[:MAX_AUDITS]
    if not audits:
        raise FileNotFoundError(
            f"{folder.histograms}: no saved histograms, and no worker's record to rebuild "
            "them from (is this a run's output?)"
        )
    totals = MetricSet()
    starts: list[int] = []
    ends: list[int] = []
    for path in audits:
        saved = read_checked(path, WORKER_AUDIT)
        totals.add(_worker_totals(path, saved))
        window = saved.get("window_wall_ns") or []
        if len(window) == 2 and 0 < window[0] <= window[1]:
            starts.append(window[0])
            ends.append(window[1])
    facts = RunFacts(
        scenario=scenario,
        complete=False,
        window_wall_ns=[min(starts), max(ends)] if starts else None,
        recovered=f"the Locust master's results were lost: rebuilt from {len(audits)} "
        f"worker record{'s' if len(audits) > 1 else ''} ({folder.workers.name}/*.json)",
    )
    return totals, facts


def _worker_totals(path: Path, saved: dict[str, Any]) -> MetricSet:
    refuse_too_many_histograms(path, saved)
    try:
        return MetricSet.decode(saved)
    except HistogramDecodeError as error:
        raise ResultsError(path, "", str(error)) from None


__all__ = ["recovered_results"]
