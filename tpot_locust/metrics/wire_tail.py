"""A worker's new tail gaps on the wire: as columns, read into gaps only where they enter.

Each kept gap is a record of ~11 fields (``gap_tagging``); as one msgpack map each, a busy
worker's ~60 new gaps a second were most of a report's bytes and of the master's time to
unpack it (Locust's reader calls a hook per map). As columns (the keys once, a list per
key) they cost a quarter of that, and the master builds a gap's record only when it is
above its own kept set's smallest (``WireTail.above``), which with many workers is rarely.
Records of different keys (none of ours) travel as they are, in ``rows``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from tpot_locust.metrics.histograms import HistogramDecodeError
from tpot_locust.metrics.tail_gaps import TAIL_GAPS_KEPT

MAX_KEYS = 64
MAX_KEY_CHARS = 200
INT_LIMIT = 1 << 63  # a count or a size on the wire: an int below it (int64, as we keep them)


def pack_tail(gaps: list[dict[str, Any]]) -> dict[str, Any]:
    """Gaps of one key set as columns; any other set, as rows (msgpack-safe)."""
    keys = list(gaps[0]) if gaps else []
    if any(list(gap) != keys for gap in gaps):
        return {"keys": [], "columns": [], "rows": gaps}
    return {"keys": keys, "columns": [[gap[key] for gap in gaps] for key in keys], "rows": []}


@dataclass
class WireTail:
    """Tail gaps as read: columns (and any rows), every gap's ``ms`` checked."""

    keys: list[str]
    columns: list[list[Any]]
    rows: list[dict[str, Any]]

    def above(self, floor: float | None) -> list[dict[str, Any]]:
        """The gaps larger than ``floor`` (all of them for None), as records, in order."""
        gaps = []
        if self.keys:
            sizes = self.columns[self.keys.index("ms")]
            chosen = (
                range(len(sizes))
                if floor is None
                else [index for index, size in enumerate(sizes) if size > floor]
            )
            gaps = [
                {key: column[index] for key, column in zip(self.keys, self.columns, strict=True)}
                for index in chosen
            ]
        return gaps + [gap for gap in self.rows if floor is None or gap["ms"] > floor]


def unpack_tail(data: Any) -> WireTail:
    """Checked: bounded, columns as long as each other, every gap a finite ``ms`` >= 0."""
    if not isinstance(data, dict):
        raise HistogramDecodeError("tail_gaps: not a mapping")
    keys, columns, rows = data.get("keys"), data.get("columns"), data.get("rows")
    if not (isinstance(keys, list) and isinstance(columns, list) and isinstance(rows, list)):
        raise HistogramDecodeError("tail_gaps: keys, columns and rows are not lists")
    if len(keys) > MAX_KEYS or len(columns) != len(keys) or len(rows) > TAIL_GAPS_KEPT:
        raise HistogramDecodeError("tail_gaps: keys and columns do not match, or too many")
    if not all(type(key) is str and 0 < len(key) <= MAX_KEY_CHARS for key in keys):
        raise HistogramDecodeError("tail_gaps: a key that is not a short text")
    if keys and ("ms" not in keys or len(set(keys)) != len(keys)):
        raise HistogramDecodeError("tail_gaps: no ms column, or a key twice")
    if not all(isinstance(column, list) for column in columns):
        raise HistogramDecodeError("tail_gaps: a column that is not a list")
    if len({len(column) for column in columns}) > 1 or len(columns and columns[0]) > TAIL_GAPS_KEPT:
        raise HistogramDecodeError(
            f"tail_gaps: columns of different lengths, or past {TAIL_GAPS_KEPT}"
        )
    if keys:
        check_sizes(columns[keys.index("ms")], "tail_gaps")
    if not all(isinstance(row, dict) for row in rows):
        raise HistogramDecodeError("tail_gaps: a row that is not a record")
    check_sizes([row.get("ms") for row in rows], "tail_gaps")
    return WireTail(keys, columns, rows)


def check_sizes(sizes: list[Any], what: str) -> None:
    """Each a finite number >= 0 (what the merges sort by): a float, or an int below 2**63
    (a bool, a text, a None or a list is none). In plain Python: for the ~30 gaps of a
    report, twice as fast as one numpy array of them."""
    if not all(
        (type(size) is float and 0.0 <= size < math.inf)
        or (type(size) is int and 0 <= size < INT_LIMIT)
        for size in sizes
    ):
        raise HistogramDecodeError(f"{what}: a record without a finite size in ms")
