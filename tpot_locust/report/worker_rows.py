"""A worker's row of the summary's per-worker view: made by the worker from its own
figures (``metrics.worker_figures``), checked and kept by the master, latest only.

The master used to keep every worker's buckets to make these figures at the end (~90 kB a
busy worker: 179 MB for 1,000). A row is a few hundred bytes to a few kB (its attribution),
whatever the worker recorded; a master keeps one per worker, and a worker that dies leaves
its last. A row is untrusted input on the master: ``check_row`` holds it to the shape
``worker_row`` makes (known keys only, every number finite and in range) or refuses it.

A row travels as its own msgpack bytes (``pack_row``), kept as they came (``LatestRows``)
and read only when the summary asks: read and checked on arrival, a busy row cost the
master ~60 us a report (a tenth of its work) for a row the next second replaced.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Any

import msgpack

from tpot_locust.common.percentiles import TAIL_KEYS
from tpot_locust.metrics.causes import CAUSES, UNEXPLAINED
from tpot_locust.metrics.histogram_names import CAUSE_METRICS
from tpot_locust.metrics.histograms import histogram_stats
from tpot_locust.metrics.worker_figures import WorkerFigures
from tpot_locust.report.attribution import worker_shares

READ_DELAY_PERCENTILES = (90.0, 99.0)
READ_DELAY_KEYS = tuple(f"read_delay_p{p:g}_ms" for p in READ_DELAY_PERCENTILES)
# A row's keys, in the summary's order: each a map of worker name -> the worker's value.
# Every row has ``stalls``, ``loop_lag_max_ms`` and ``attribution``; the read delays only
# once it read any, ``loop_held_share`` once its probe watched.
ROW_KEYS = (*READ_DELAY_KEYS, "stalls", "loop_lag_max_ms", "loop_held_share", "attribution")
_ALWAYS = ("stalls", "loop_lag_max_ms", "attribution")
_LARGEST_MS = 1e12  # no figure of ours comes near (the histograms stop at one hour)
_SHARE_KEYS = frozenset(("above_ms", "samples", "shares"))
_CAUSE_KEYS = frozenset((*CAUSES, UNEXPLAINED))
MAX_ROW_BYTES = 1 << 20  # a busy row with every cause: ~2 kB

logger = logging.getLogger(__name__)


class RowError(ValueError):
    """A worker's row this master cannot take: not the shape ``worker_row`` makes."""


def worker_row(
    figures: WorkerFigures, pause: Callable[[], None] | None = None
) -> dict[str, object]:
    """The worker's figures as the master's summary shows them (``ROW_KEYS``), ~0.8 ms for
    a busy worker with every cause; ``pause``: called before each histogram read and each
    tail's shares (~0.1 ms apart; a worker passes ``WorkSlices.after_item``)."""
    pause = pause or _no_pause
    row: dict[str, Any] = {}
    if figures.read_delay.total_count:
        pause()
        delays = histogram_stats(figures.read_delay, READ_DELAY_PERCENTILES).percentiles
        for percentile, key in zip(READ_DELAY_PERCENTILES, READ_DELAY_KEYS, strict=True):
            row[key] = delays[percentile] / 1000
    health = figures.health
    row["stalls"] = health.stalls
    pause()
    row["loop_lag_max_ms"] = histogram_stats(health.loop_lag, ()).max / 1000
    if health.held_share is not None:
        row["loop_held_share"] = round(health.held_share, 4)
    pause()
    row["attribution"] = worker_shares(figures.causes, pause)
    return row


def pack_row(row: dict[str, object]) -> bytes:
    """A row as it travels: its own msgpack bytes, read by the master only when needed."""
    packed: bytes = msgpack.packb(row)
    return packed


def sent_row(sent: object) -> bytes:
    """What a master checks of a row as it arrives: bytes, bounded; else ``RowError``."""
    if not isinstance(sent, bytes) or len(sent) > MAX_ROW_BYTES:
        raise RowError(f"a worker's row is not msgpack bytes of at most {MAX_ROW_BYTES:,}")
    return sent


class LatestRows:
    """Each worker's latest row as it came (``pack_row``'s bytes, bounded), read and checked
    at most once, when the summary asks. A row that is not one (``check_row``) is left out
    of the per-worker view and logged with its worker: only the row, never its delta."""

    def __init__(self) -> None:
        self._sent: dict[str, bytes] = {}
        self._read: dict[str, dict[str, object] | None] = {}

    def keep(self, worker: str, sent: bytes) -> None:
        self._sent[worker] = sent
        self._read.pop(worker, None)

    def read(self) -> dict[str, dict[str, object]]:
        """Each worker's latest row that reads as one, by worker."""
        for worker, sent in self._sent.items():
            if worker not in self._read:
                self._read[worker] = _read_row(worker, sent)
        return {worker: row for worker, row in self._read.items() if row is not None}


def _read_row(worker: str, sent: bytes) -> dict[str, object] | None:
    try:
        return check_row(msgpack.unpackb(sent, raw=False, strict_map_key=False))
    except Exception as error:  # noqa: BLE001 - damage of any kind: msgpack's vary
        logger.error(
            "tpot-locust: worker %s sent a row this master cannot read (%s: %s): left out "
            "of the per-worker figures",
            worker,
            type(error).__name__,
            error,
        )
        return None


def _no_pause() -> None:
    """Not cooperative: run through."""


def check_row(row: object) -> dict[str, object]:
    """The row as sent, if it is one ``worker_row`` could make; else ``RowError``."""
    if not isinstance(row, dict) or not set(_ALWAYS) <= row.keys() <= set(ROW_KEYS):
        raise RowError(f"a worker's row has keys other than {ROW_KEYS}")
    for key in (*READ_DELAY_KEYS, "loop_lag_max_ms"):
        if key in row:
            _number(row[key], _LARGEST_MS, key)
    _count(row["stalls"], "stalls")
    if "loop_held_share" in row:
        _number(row["loop_held_share"], 1.0, "loop_held_share")
    attribution = row["attribution"]
    if not isinstance(attribution, dict) or not attribution.keys() <= set(CAUSE_METRICS):
        raise RowError(f"attribution: not a map of {CAUSE_METRICS}")
    for metric, tails in attribution.items():
        if not isinstance(tails, dict) or not tails.keys() <= set(TAIL_KEYS):
            raise RowError(f"attribution.{metric}: not a map of {TAIL_KEYS}")
        for tail, shares in tails.items():
            _check_tail(shares, f"attribution.{metric}.{tail}")
    return row


def _check_tail(tail: object, where: str) -> None:
    if not isinstance(tail, dict) or tail.keys() != _SHARE_KEYS:
        raise RowError(f"{where}: not a map of {sorted(_SHARE_KEYS)}")
    _number(tail["above_ms"], _LARGEST_MS, f"{where}.above_ms")
    _count(tail["samples"], f"{where}.samples")
    shares = tail["shares"]
    if not isinstance(shares, dict) or not shares.keys() <= _CAUSE_KEYS:
        raise RowError(f"{where}.shares: not a map of causes")
    for cause, share in shares.items():
        if share is not None:  # not held to 1: nothing that would stop a run rests on it
            _number(share, _LARGEST_MS, f"{where}.shares.{cause}")


def _number(value: Any, largest: float, what: str) -> None:
    if type(value) not in (int, float) or not (math.isfinite(value) and 0 <= value <= largest):
        raise RowError(f"{what}: {value!r} is not a number in [0, {largest:g}]")


def _count(value: object, what: str) -> None:
    if type(value) is not int or not 0 <= value < 1 << 63:
        raise RowError(f"{what}: {value!r} is not a count in [0, 2**63)")


def workers_view(rows: dict[str, dict[str, object]]) -> dict[str, dict[str, Any]]:
    """The summary's per-worker part: each of ``ROW_KEYS`` a map of worker name -> its
    value, the workers in name order, each with the keys its row has."""
    named = sorted(rows.items())
    return {key: {name: row[key] for name, row in named if key in row} for key in ROW_KEYS}
