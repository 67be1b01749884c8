"""Issue 45, item 3: a worker makes its own row of the per-worker view and the master keeps
only the latest, checked: a row is untrusted input (known keys, finite numbers in range)."""

from __future__ import annotations

import copy
import math
from types import SimpleNamespace
from typing import Any

import msgpack
import pytest

from tests.unit.test_wire_delta import worker_deltas
from tpot_locust.common.percentiles import TAIL_KEYS
from tpot_locust.harness.run.distributed import MasterLink
from tpot_locust.harness.run.worker_deltas import pack_delta
from tpot_locust.metrics.causes import CAUSES
from tpot_locust.metrics.histogram_names import CAUSE_METRICS
from tpot_locust.metrics.histograms import add_into, new_histogram
from tpot_locust.metrics.metric_set import MetricSet
from tpot_locust.metrics.worker_figures import WorkerFigures
from tpot_locust.report.worker_rows import (
    MAX_ROW_BYTES,
    LatestRows,
    RowError,
    check_row,
    worker_row,
)


def busy_row(every_cause: bool = False) -> dict[str, Any]:
    """A worker's row after a few real deltas; ``every_cause``: a part for each cause."""
    figures = WorkerFigures()
    for delta in worker_deltas(3, seed=4):
        figures.add(delta)
    if every_cause:
        for metric in ("itl", "tpot"):
            for cause in CAUSES:
                add_into(
                    figures.causes.merged_into(f"{metric}@{cause}"),
                    figures.causes.histogram(metric),
                )
    return worker_row(figures)


def through_msgpack(value: Any) -> Any:
    return msgpack.unpackb(msgpack.packb(value), raw=False, strict_map_key=False)


def test_a_row_as_made_passes_and_is_small() -> None:
    for every_cause in (False, True):
        row = through_msgpack(busy_row(every_cause))
        assert check_row(row) == row
        assert len(msgpack.packb(row)) < 4000  # all causes: ~2.7 kB; a master keeps one a worker
    assert set(busy_row(True)["attribution"]["itl"]["p99"]["shares"]) == {*CAUSES, "none"}


def test_an_idle_workers_row_has_no_read_delays_and_no_attribution() -> None:
    row = worker_row(WorkerFigures())
    assert row == {"stalls": 0, "loop_lag_max_ms": 0.0, "attribution": {}}
    assert check_row(row) == row


BUSY = busy_row()


def changed(path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    """A busy row with the value at ``path`` replaced (``...``: removed)."""
    row = copy.deepcopy(BUSY)
    *parents, last = path
    where = row
    for key in parents:
        where = where[key]
    if value is ...:
        del where[last]
    else:
        where[last] = value
    return row


HOSTILE = {
    "not a map": ["stalls", 1],
    "an unknown key": changed(("extra",), 1),
    "no stalls": changed(("stalls",), ...),
    "stalls negative": changed(("stalls",), -1),
    "stalls a float": changed(("stalls",), 1.0),
    "stalls a bool": changed(("stalls",), True),
    "stalls past 2**63": changed(("stalls",), 2**64 - 1),
    "lag NaN": changed(("loop_lag_max_ms",), math.nan),
    "lag infinite": changed(("loop_lag_max_ms",), math.inf),
    "lag a text": changed(("loop_lag_max_ms",), "1"),
    "read delay negative": changed(("read_delay_p90_ms",), -0.5),
    "held share over 1": changed(("loop_held_share",), 1.5),
    "held share None": changed(("loop_held_share",), None),
    "attribution a list": changed(("attribution",), []),
    "an unknown metric": changed(("attribution", "ttft"), {}),
    "an unknown tail": changed(("attribution", "itl", "p50"), {}),
    "a tail's unknown key": changed(("attribution", "itl", "p99", "story"), "x" * 10**6),
    "a tail without samples": changed(("attribution", "itl", "p99", "samples"), ...),
    "an unknown cause": changed(("attribution", "itl", "p99", "shares", "x" * 300), 0.5),
    "a share NaN": changed(("attribution", "itl", "p99", "shares", "none"), math.nan),
    "a share negative": changed(("attribution", "itl", "p99", "shares", "none"), -0.1),
    "a share infinite": changed(("attribution", "itl", "p99", "shares", "none"), math.inf),
    "shares a list": changed(("attribution", "itl", "p99", "shares"), [0.5] * 10**5),
    "above_ms huge": changed(("attribution", "tpot", "p99.9", "above_ms"), 1e300),
}


@pytest.mark.parametrize("row", HOSTILE.values(), ids=HOSTILE.keys())
def test_a_hostile_row_is_refused(row: Any) -> None:
    with pytest.raises(RowError):
        check_row(through_msgpack(row))


def test_the_master_leaves_out_a_hostile_row_when_read_its_delta_merged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A row is read when the summary asks (the next report replaces it): a hostile one is
    left out then, logged with its worker, and its delta was merged as any other; a row that
    cannot be one (not bytes, or too large) is refused with its delta, as a damaged delta."""
    stops: list[str] = []
    merged: list[Any] = []
    rows = LatestRows()

    def merge(client_id: str, delta: Any, row: bytes | None) -> None:
        merged.append(client_id)
        if row is not None:
            rows.keep(client_id, row)

    master = SimpleNamespace(refused=set(), on_stop_run=stops.append, _merge=merge)
    delta = MetricSet()
    delta.for_group("chat").counters.ok = 3
    hostile = through_msgpack(pack_delta(delta, HOSTILE["a share NaN"]))
    good = through_msgpack(pack_delta(delta, busy_row()))
    for worker, packed in (("w1", hostile), ("w2", good), ("w3", good)):
        MasterLink._add_delta(master, worker, packed)  # type: ignore[arg-type]
    assert merged == ["w1", "w2", "w3"] and stops == []
    with caplog.at_level("ERROR"):
        assert rows.read() == {"w2": BUSY, "w3": BUSY}
        assert rows.read() == {"w2": BUSY, "w3": BUSY}  # read once
    (logged,) = [r.getMessage() for r in caplog.records if "cannot read" in r.getMessage()]
    assert "worker w1 sent a row" in logged and "attribution.itl.p99.shares.none" in logged
    rows.keep("w1", good["row"])  # its next report's row replaces it
    assert rows.read()["w1"] == BUSY
    for row in ("a text", b"x" * (MAX_ROW_BYTES + 1)):
        MasterLink._add_delta(master, "w4", good | {"row": row})  # type: ignore[arg-type]
    assert "w4" not in merged and master.refused == {"w4"} and len(stops) == 1
    assert "not msgpack bytes" in stops[0]


def test_a_histogram_a_delta_holds_empty_makes_no_part() -> None:
    """On the wire an empty histogram is left out, and the master made no part of it: a
    part present with no sample would show a share of 0 where the master showed none."""
    (delta,) = worker_deltas(1, seed=2)
    delta.groups["chat"].histograms["itl@prefill"] = new_histogram()
    figures = WorkerFigures()
    figures.add(delta)
    assert "itl@prefill" not in figures.causes.histograms
    assert "prefill" not in worker_row(figures)["attribution"]["itl"]["p99"]["shares"]


def test_a_row_made_cooperatively_yields_between_its_histograms() -> None:
    """On a worker the row is made as streams are read: a yield before each histogram
    read (read delays, loop lag, each metric's whole and each of its tails)."""
    figures = WorkerFigures()
    for delta in worker_deltas(2, seed=6):
        figures.add(delta)
    yields: list[int] = []
    row = worker_row(figures, lambda: yields.append(1))
    assert row == worker_row(figures)
    assert len(yields) == 3 + len(CAUSE_METRICS) * len(TAIL_KEYS)
