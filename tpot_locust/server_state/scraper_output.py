"""The metrics scraper's lines (``server_state.scraper``), written to the parent on stdout
and to the run's ``server_metrics.jsonl``: apart because writing them has rules of its own
(a pipe never blocks the sampling; a full disk stops the file, not the samples).
"""

from __future__ import annotations

import json
import os
import select
import stat
import sys
import threading
from collections.abc import Mapping
from typing import IO

from tpot_locust.server_state.engines import COUNTERS, GAUGES

_STDOUT_KEYS = (
    "kind",
    "i",
    "t_wall_s",
    "engine",
    *GAUGES,
    *COUNTERS,
    "dt_s",
    "preemptions",
    "prompt_tokens_per_s",
    "generation_tokens_per_s",
    "itl_p99_low_ms",
    "itl_p99_high_ms",
    "resets",
    "slow",
)


class ScraperOutput:
    """The lines, to stdout (compact, no histograms) and the file, one writer at a time.

    A pipe to the parent is written without blocking: a parent whose loop is held up does
    not hold up the sampling. A line that finds the pipe full is dropped from stdout (the
    file has it) and counted; the final line waits for room (the parent is reading it)."""

    def __init__(self, out: IO[str] | None, fd: int) -> None:
        self.out = out
        self.fd = fd
        self.lock = threading.Lock()
        self.closed = False
        self.dropped = 0
        try:
            self.pipe = stat.S_ISFIFO(os.fstat(fd).st_mode)
        except OSError:
            self.pipe = False
        if self.pipe:
            os.set_blocking(fd, False)

    def _print(self, data: bytes, final: bool) -> None:
        try:
            if not self.pipe or final:
                if self.pipe:
                    os.set_blocking(self.fd, True)
                view = memoryview(data)
                while view:
                    view = view[os.write(self.fd, view) :]
            elif len(data) <= select.PIPE_BUF:  # all or nothing: never half a line
                os.write(self.fd, data)
            else:
                self.dropped += 1
        except BlockingIOError:
            self.dropped += 1
        except OSError:  # the parent is gone: the file still gets every line
            pass

    def emit(self, line: dict[str, object], to_file: bool) -> None:
        with self.lock:
            if self.closed:
                return
            final = line["kind"] == "final"
            if final:
                line = {**line, "stdout_dropped": self.dropped}
            shown = line
            if line["kind"] == "sample":  # a GPU's state is small: it goes too
                shown = {k: line[k] for k in _STDOUT_KEYS}
                if "gpu" in line:
                    shown["gpu"] = line["gpu"]
            self._print((json.dumps(shown, separators=(",", ":")) + "\n").encode(), final)
            if to_file and self.out is not None:
                try:
                    self.out.write(json.dumps(line, separators=(",", ":")) + "\n")
                    self.out.flush()
                except OSError as error:  # a full disk: the file stops, the samples go on
                    self._file_failed(error)

    def _file_failed(self, error: OSError) -> None:
        """The file cannot take a line (ENOSPC): said once, on stderr; the lines go on to
        the parent on stdout, which summarises them (the run's ``server_metrics``)."""
        out, self.out = self.out, None
        name = getattr(out, "name", "the file")
        print(
            f"tpot-locust: server metrics: {name}: {error.strerror or error}: its lines stop "
            "here; the samples still reach the run",
            file=sys.stderr,
            flush=True,
        )
        try:
            if out is not None:
                out.close()
        except OSError:  # its buffered rest cannot be written either
            pass

    def close(self, final: Mapping[str, object]) -> None:
        self.emit(dict(final), True)
        with self.lock:
            self.closed = True
            if self.out is not None:
                try:
                    self.out.close()
                except OSError as error:
                    self._file_failed(error)


__all__ = ["ScraperOutput"]
