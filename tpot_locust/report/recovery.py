"""A results folder the Locust master's death left, finished from what survived.

The master holds the merged totals of a distributed run; killed (OOM, an evicted pod,
SIGKILL), it takes them with it and writes no ``histograms.json``. Each worker keeps what it
recorded: stopped (``cli.processes``: as soon as the master is gone; or by its own
SIGTERM), it writes ``workers/<id>.json``, every delta of its test including the last one
(``harness.run.distributed.WorkerLink.write_audit``). Every token gap is recorded by exactly one
worker, so their totals added are the run's: nothing counted twice, nothing that reached a
surviving worker lost. What died with the master: its time series and server samples, and
the figures of a worker that died with it.

A process killed with its workers, or a local runner killed (no worker to ask), leaves its
``checkpoint.json`` (``report.checkpoint``): the totals and facts as they stood at its last
report interval. Where both are there, the one holding more token gaps is the run's (the
workers' records when every worker saved its own; the checkpoint when some died too).

The facts are marked ``complete: false``, with ``recovered`` saying from what; the window is
the workers' own (the earliest start to the latest end), or the checkpoint's.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from tpot_locust.common.metric_catalogue import ITL
from tpot_locust.common.results_folder import ResultsFolder
from tpot_locust.common.run_facts import RunFacts
from tpot_locust.metrics.histograms import HistogramDecodeError
from tpot_locust.metrics.metric_set import MetricSet
from tpot_locust.report.histograms_file import read_results
from tpot_locust.report.saved_results import (
    WORKER_AUDIT,
    ResultsError,
    read_checked,
    refuse_too_many_histograms,
)

MAX_AUDITS = 10_000  # as many workers as a run has (``RunFacts.process_windows_wall_ns``)


def recovered_results(folder: ResultsFolder, scenario: str | None) -> tuple[MetricSet, RunFacts]:
    """The run's totals from its workers' records or its last checkpoint, and its facts as
    far as they tell; ``FileNotFoundError`` where the folder has neither, ``ResultsError``
    for a damaged one."""
    found = [
        source
        for source in (_from_workers(folder, scenario), _from_checkpoint(folder, scenario))
        if source is not None
    ]
    if not found:
        raise FileNotFoundError(
            f"{folder.histograms}: no saved histograms, and no worker's record or checkpoint "
            "to rebuild them from (is this a run's output?)"
        )
    return max(found, key=lambda source: token_gaps(source[0]))  # the first of equals


def token_gaps(totals: MetricSet) -> int:
    """The token gaps ``totals`` counted (its ITL histograms' counts: each gap is in one
    metric group, so no group needs merging first)."""
    return sum(part.read(ITL.name).get_total_count() for part in totals.groups.values())


def _from_checkpoint(
    folder: ResultsFolder, scenario: str | None
) -> tuple[MetricSet, RunFacts] | None:
    path = folder.checkpoint
    if path.is_symlink() or not path.is_file():
        return None
    totals, run = read_results(path)
    window = run.window_wall_ns
    as_of = (
        f"as of {(window[1] - window[0]) / 1e9:.1f} s into the window"
        if window and len(window) == 2
        else "as of a report interval"
    )
    recovered = (
        f"the Locust process's results were lost: rebuilt from its last checkpoint "
        f"({path.name}, the totals {as_of})"
    )
    return totals, replace(
        run, scenario=run.scenario or scenario, complete=False, recovered=recovered
    )


def _from_workers(folder: ResultsFolder, scenario: str | None) -> tuple[MetricSet, RunFacts] | None:
    found = folder.workers.glob("*.json") if folder.workers.is_dir() else []
    audits = sorted(path for path in found if not path.is_symlink())[:MAX_AUDITS]
    if not audits:
        return None
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


def _worker_totals(path: Path, saved: dict[str, object]) -> MetricSet:
    refuse_too_many_histograms(path, saved)
    try:
        return MetricSet.decode(saved)
    except HistogramDecodeError as error:
        raise ResultsError(path, "", str(error)) from None


__all__ = ["recovered_results"]
