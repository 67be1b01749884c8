"""``checkpoint.json``: the totals on disk as a run goes, and the rebuild that reads it
(``report.checkpoint``, ``report.recovery``); a killed run's: tests/process/test_fault_matrix.py.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tpot_locust.common import cooperation
from tpot_locust.common.cooperation import WorkSlices
from tpot_locust.common.results_folder import ResultsFolder
from tpot_locust.common.run_facts import RunFacts
from tpot_locust.harness.watch import loop_yield
from tpot_locust.metrics.metric_set import MetricSet
from tpot_locust.report.checkpoint import LIST_CHUNK, Checkpoint, _dumps
from tpot_locust.report.histograms_file import read_results, write_histograms
from tpot_locust.report.recovery import recovered_results, token_gaps


def _totals(gaps: int) -> MetricSet:
    totals = MetricSet()
    itl = totals.for_group("chat").histogram("itl")
    for _ in range(gaps):
        itl.record_value(2000)
    return totals


def _facts(window_s: float = 60.0) -> RunFacts:
    start = time.time_ns() - 1_000_000_000
    return RunFacts(scenario="ckpt", window_wall_ns=[start, start + int(window_s * 1e9)])


def _worker_record(folder: ResultsFolder, name: str, gaps: int) -> None:
    folder.workers.mkdir(parents=True, exist_ok=True)
    now = time.time_ns()
    record = {"client_id": name, **_totals(gaps).encode(), "window_wall_ns": [now - 10**9, now]}
    folder.worker(name).write_text(json.dumps(record))


def test_a_checkpoint_holds_the_totals_and_a_window_that_ends_when_it_was_written(
    tmp_path: Path,
) -> None:
    folder = ResultsFolder(tmp_path)
    before_ns = time.time_ns()
    Checkpoint(folder).save(_totals(5), lambda: _facts(window_s=60))
    totals, facts = read_results(folder.checkpoint)
    assert token_gaps(totals) == 5 and facts.scenario == "ckpt"
    assert facts.window_wall_ns is not None
    assert before_ns <= facts.window_wall_ns[1] <= time.time_ns()  # now, not the planned end
    assert not list(tmp_path.glob(".*.tmp"))  # written whole, via a rename


def test_the_next_checkpoint_waits_fifty_times_the_last_ones_cost(tmp_path: Path) -> None:
    checkpoint = Checkpoint(ResultsFolder(tmp_path))
    checkpoint.save(_totals(1), _facts)
    checkpoint.save(_totals(2), _facts)  # at once: too soon
    assert checkpoint.written == 1
    assert token_gaps(read_results(tmp_path / "checkpoint.json")[0]) == 1


def test_a_checkpoint_that_cannot_be_written_is_logged_and_the_run_goes_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "checkpoint.json").mkdir()  # not a file: the rename fails
    checkpoint = Checkpoint(ResultsFolder(tmp_path))
    checkpoint.save(_totals(1), _facts)
    assert checkpoint.failed is not None and checkpoint.written == 0
    assert "checkpoint.json could not be written" in caplog.text


def test_the_run_saved_whole_removes_its_checkpoint(tmp_path: Path) -> None:
    folder = ResultsFolder(tmp_path)
    Checkpoint(folder).save(_totals(3), _facts)
    assert folder.checkpoint.is_file()
    write_histograms(folder, _totals(4), _facts())
    assert folder.histograms.is_file() and not folder.checkpoint.exists()


def test_a_local_runs_checkpoint_rebuilds_the_run_marked_incomplete(tmp_path: Path) -> None:
    folder = ResultsFolder(tmp_path)
    Checkpoint(folder).save(_totals(7), _facts)
    totals, facts = recovered_results(folder, "from-the-cli")
    assert token_gaps(totals) == 7
    assert facts.complete is False and facts.scenario == "ckpt"
    assert facts.recovered is not None
    assert "rebuilt from its last checkpoint (checkpoint.json" in facts.recovered


@pytest.mark.parametrize(
    ("checkpoint_gaps", "chosen"), [(3, "worker"), (9, "checkpoint"), (5, "worker")]
)
def test_the_source_holding_more_token_gaps_is_the_runs(
    tmp_path: Path, checkpoint_gaps: int, chosen: str
) -> None:
    """Every worker saved (their records hold up to the end) or some died with the master
    (the checkpoint holds more): the larger is the run's, the workers' of equals."""
    folder = ResultsFolder(tmp_path)
    _worker_record(folder, "w1", 2)
    _worker_record(folder, "w2", 3)
    Checkpoint(folder).save(_totals(checkpoint_gaps), _facts)
    totals, facts = recovered_results(folder, "scenario")
    assert token_gaps(totals) == max(5, checkpoint_gaps)
    assert facts.recovered is not None
    assert ("worker records" in facts.recovered) == (chosen == "worker")


def test_a_folder_with_neither_says_what_it_looked_for(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no worker's record or checkpoint"):
        recovered_results(ResultsFolder(tmp_path), None)


def test_a_linked_checkpoint_is_not_read(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    Checkpoint(ResultsFolder(elsewhere)).save(_totals(2), _facts)
    run = tmp_path / "run"
    run.mkdir()
    (run / "checkpoint.json").symlink_to(elsewhere / "checkpoint.json")
    with pytest.raises(FileNotFoundError):
        recovered_results(ResultsFolder(run), None)


def test_a_number_json_cannot_hold_is_written_as_null(tmp_path: Path) -> None:
    """The compact write refuses NaN (``allow_nan=False``); the strict writer takes it."""
    folder = ResultsFolder(tmp_path)
    Checkpoint(folder).save(_totals(2), lambda: RunFacts(scenario="nan", duration_s=float("nan")))
    totals, facts = read_results(folder.checkpoint)
    assert token_gaps(totals) == 2 and facts.duration_s is None and facts.scenario == "nan"


def test_the_dump_is_json_dumps_text_made_in_pieces_with_a_yield_between() -> None:
    """In one ``json.dumps`` a busy run's document held a local run's loop ~5 ms each
    interval (its tail gaps' list, mostly): a client stall each time on the user clock."""
    document = {
        "format": "tpot-locust/histograms/v1",
        "classes": {
            "chat": {
                "tail_gaps": [
                    {"id": f"r{i}", "gap_ms": i / 7, "causes": ["prefill"]} for i in range(450)
                ],
                "histograms": {"itl": {"counts": "HISTFAAAA", "n": 3}, "e2e": None},
            },
            "ünïcode \u2028": {"1": [1, 2.5, True, None]},
        },
        "deep": {"a": {"b": {"c": {"d": {"e": [1] * 250}}}}},
        "small": list(range(LIST_CHUNK)),
    }
    yields = []
    cooperation.use_yield(lambda: yields.append(1))
    try:
        text = _dumps(document, WorkSlices(slice_ns=0))
    finally:
        loop_yield.install()  # the suite's (tests/conftest.py)
    assert text == json.dumps(document, separators=(",", ":"), allow_nan=False)
    assert len(yields) >= 450 // LIST_CHUNK + 5  # the long list in chunks, each leaf apart
    with pytest.raises(ValueError):  # the strict way takes a NaN (_write: written as null)
        _dumps({"a": [float("nan")] * (LIST_CHUNK + 1)}, WorkSlices())
