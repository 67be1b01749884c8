"""Ground-truth writer: one JSON line per finished or aborted request.

The load tester's measurements are checked against these lines, so they are flushed at least
every 100 ms (a test can read them while the server runs) and on shutdown.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import TYPE_CHECKING

from tpot_locust.common.results_files import open_for_writing

if TYPE_CHECKING:
    from ..common.clock import WallClock
    from .request import SimRequest

FLUSH_INTERVAL_S = 0.1


class TruthWriter:
    """Buffers lines and flushes them within ``FLUSH_INTERVAL_S``; disabled without a path."""

    def __init__(self, path: Path | None, loop: asyncio.AbstractEventLoop) -> None:
        self.path = path
        self._loop = loop
        self._lines: list[str] = []
        self._timer: asyncio.TimerHandle | None = None
        self._file = None
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._file = open_for_writing(path)  # never through a link planted there

    @property
    def enabled(self) -> bool:
        return self._file is not None

    def record(self, record: dict[str, object]) -> None:
        if self._file is None:
            return
        self._lines.append(json.dumps(record, separators=(",", ":")) + "\n")
        if self._timer is None:
            self._timer = self._loop.call_later(FLUSH_INTERVAL_S, self.flush)

    def flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._file is None or not self._lines:
            return
        lines, self._lines = self._lines, []
        self._file.write("".join(lines))
        self._file.flush()

    def close(self) -> None:
        self.flush()
        if self._file is not None:
            self._file.close()
            self._file = None


def read_truth(path: Path | str) -> list[dict[str, object]]:
    """All complete lines of a truth file (a partial last line is skipped)."""
    records = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.endswith("\n"):
                records.append(json.loads(line))
    return records


def request_truth(
    request: SimRequest, clock: WallClock, send_ns: list[int], tokens: list[int], aborted: bool
) -> dict[str, object]:
    """The keys every request line has, in either timing mode (see docs/simulator.md)."""
    return {
        "request_id": request.request_id,
        "api": request.api,
        "model": request.model,
        "prompt_tokens": request.prompt_tokens,
        "cached_tokens": request.cached_tokens,
        "completion_tokens": sum(tokens),
        "arrival_ns": clock.wall(request.arrival_perf_ns),
        "send_ns": send_ns,
        "tokens": tokens,
        "perf_offset_ns": clock.offset_ns,
        "aborted": aborted,
        "stream": request.stream,
        "finish_reason": None if aborted else request.finish_reason,
    }
