"""A worker's deltas as they travel to its master: each taken with the worker's row of the
per-worker view, packed with its format and version; read (or refused) by the master.

Each report carries the worker's row of the summary's per-worker view, made by the worker
from everything it sent this test (``report.worker_rows``): the master keeps the latest row
of each worker, a few hundred bytes, never the worker's buckets. A delta of another version
is refused with a message naming both, instead of merged wrong (``DELTA_FORMAT``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gevent.lock import Semaphore

from tpot_locust.common.cooperation import WorkSlices
from tpot_locust.common.version import __version__
from tpot_locust.metrics.metric_set import MetricSet
from tpot_locust.metrics.wire_delta import WireDelta, decode_delta, encode_delta
from tpot_locust.metrics.worker_figures import WorkerFigures
from tpot_locust.report.worker_rows import pack_row, sent_row, worker_row

if TYPE_CHECKING:
    from tpot_locust.metrics.recorder import Recorder

# The form of a worker's delta (``encode_delta`` inside ``pack_delta``). Raise it when
# a change means a master could misread a delta of the previous form: then a master and a
# worker of different versions refuse each other with a message instead of a wrong merge.
# 4: ``tail_gaps`` (with causes) for ``worst_gaps``; 5: histograms as spans of buckets and
# new tail gaps as columns (``metrics.wire_delta``), added without a histogram per report;
# 6: the worker's own row (``ROW_KEY``) beside its delta, the master keeping no buckets;
# 7: that row as its own msgpack bytes (``worker_rows.pack_row``), read when needed, and
# a span equal to an earlier one sent as its index (``span_counts``, ``copy_of``)
DELTA_FORMAT = 7
ROW_KEY = "row"  # in a packed delta: the worker's row of the per-worker view, as of it


class DeltaFormatError(ValueError):
    """A delta this master cannot merge: it comes from another version of tpot-locust."""


def pack_delta(
    delta: MetricSet, row: dict[str, Any] | None = None, cooperative: bool = False
) -> dict[str, Any]:
    packed = {
        "format": DELTA_FORMAT,
        "version": __version__,
        "metrics": encode_delta(delta, cooperative=cooperative),
    }
    if row is not None:
        packed[ROW_KEY] = pack_row(row)
    return packed


def unpack_delta(client_id: str, packed: Any) -> WireDelta:
    """The worker's delta, or ``DeltaFormatError`` naming both sides' versions (a delta
    without a format is the first one, before it was versioned)."""
    is_packed = isinstance(packed, dict) and "format" in packed
    form = packed["format"] if is_packed else 1
    if form != DELTA_FORMAT:
        theirs = packed.get("version", "unknown") if is_packed else "0.1.0 or older"
        raise DeltaFormatError(
            f"worker {client_id} runs tpot-locust {theirs} (delta format {form}); this master "
            f"runs {__version__} (delta format {DELTA_FORMAT}): its metrics cannot be merged. "
            "Install the same tpot-locust version on the master and every worker"
        )
    return decode_delta(packed["metrics"])


def unpack_row(packed: dict[str, Any]) -> bytes | None:
    """The worker's row beside a delta ``unpack_delta`` read (None: it sent none), as it
    came (``RowError``, a ``ValueError``, for what cannot be one: refused with its delta,
    before either is merged); read and checked when the summary asks (``LatestRows``)."""
    row = packed.get(ROW_KEY)
    return None if row is None else sent_row(row)


class WorkerDeltas:
    """The worker's side: each delta since the last, packed with its row as of it, and
    everything it shipped (for the worker's own audit file)."""

    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder
        self.sent = MetricSet()  # everything shipped, for the worker's own audit file
        self.figures = WorkerFigures()  # of this test: its row of the per-worker view
        # Taking a delta yields (so stamping goes on): one at a time, so the final delta
        # cannot overtake a periodic report still being assembled.
        self._taking = Semaphore()

    def new_test(self) -> None:
        """A new test: its row is made of what is sent from now on."""
        self.figures = WorkerFigures()

    def take(self, final: bool = False) -> dict[str, Any]:
        """The delta since the last, packed with this worker's row as of it (~1.4 ms a busy
        report with every cause, figures and row, in slices of 0.2 ms of work between
        yields: every report, so a worker that dies leaves the master the figures of all
        it delivered)."""
        with self._taking:
            figures = self.figures  # a new test's plan may come while this one yields
            delta = self.recorder.take_interval(final=final)
            self.sent.add(delta)
            slices = WorkSlices()  # a yield each 0.2 ms of work
            figures.add(delta, slices.after_item)
            row = worker_row(figures, slices.after_item)
            return pack_delta(delta, row, cooperative=True)
