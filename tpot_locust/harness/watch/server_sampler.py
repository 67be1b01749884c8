"""The parent side of the server-metrics sampler: start the child, read its lines, stop it.

``server_state.scraper`` runs as a child process (parsing a scrape is ~11 ms of Python that
must never hold the gevent loop that stamps tokens). Its stdout is read here line by line
in a greenlet, cooperatively (``gevent.subprocess``: the pipe is gevent's whether or not
the process is monkey-patched). Each good sample becomes the server windows of its
interval (``metrics.server_windows``), handed to ``on_windows`` from that greenlet, and a
point of the summary's series; each note is logged once. ``stop`` closes the child's stdin
(its signal to finish), waits a bounded time for its final line (the server's own run-level
percentiles) and kills it if it does not come. ``summary()`` is ``run["server_metrics"]``.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import gevent
from gevent import subprocess

from tpot_locust.common import env_vars
from tpot_locust.common.child_process import child_options
from tpot_locust.common.results_files import make_folder
from tpot_locust.common.run_facts import ServerMetrics
from tpot_locust.common.secrets import redact_url
from tpot_locust.common.text_safety import printable
from tpot_locust.metrics.causes import GPU_THROTTLE, SERVER_CAUSES, CauseWindow
from tpot_locust.metrics.server_windows import MAX_POINTS, GpuFigures, SeriesReducer, server_windows

logger = logging.getLogger(__name__)

_PACKAGE_ROOT = str(Path(__file__).resolve().parents[3])
_MAX_LINE = 1024 * 1024  # a line of ours is ~400 bytes; the final one a few KB
STOP_TIMEOUT_S = 2.0  # for the final line after stdin closed; then SIGTERM, then kill


class ServerSampler:
    """Samples ``url`` every ``interval_s`` into ``out_path`` (``server_metrics.jsonl``)
    while a run goes; ``on_windows(list[CauseWindow])`` gets each sample's server windows
    (only when there are some), from the reading greenlet."""

    def __init__(
        self,
        url: str,
        interval_s: float,
        out_path: Path | str | None,
        on_windows: Callable[[list[CauseWindow]], None] | None = None,
        max_points: int = MAX_POINTS,
    ) -> None:
        self.url = url
        self.interval_s = float(interval_s)
        self.out_path = None if out_path is None else Path(out_path)
        self.on_windows = on_windows
        self.process: subprocess.Popen | None = None
        self._reader: gevent.Greenlet | None = None
        self._reducer = SeriesReducer(max_points)
        self._gpu = GpuFigures()  # a DCGM exporter's page: its GPUs' state over the run
        self._previous: dict[str, Any] | None = None
        self._final: dict[str, Any] | None = None
        self._engine: str | None = None
        self._samples = 0
        self._slow = 0
        self._failed = 0
        self._notes: list[str] = []
        self._windows = dict.fromkeys(SERVER_CAUSES, 0)
        self._stopped = False

    def start(self) -> None:
        """Spawn the child and the greenlet that reads it; returns at once."""
        if self.process is not None:
            raise RuntimeError("the server sampler was started already")
        command = [
            sys.executable,
            "-m",
            "tpot_locust.server_state.scraper",
            "--interval",
            repr(self.interval_s),
        ]
        if self.out_path is not None:
            make_folder(self.out_path.parent)
            command += ["--out", str(self.out_path)]
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (_PACKAGE_ROOT, env.get("PYTHONPATH", "")) if p
        )
        env["PYTHONUNBUFFERED"] = "1"
        env[env_vars.METRICS_URL] = self.url  # not in argv: a password in it stays out of ps
        # its own process group, dying with us (PR_SET_PDEATHSIG; and its stdin closes)
        self.process = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            env=env,
            **{**child_options(), "stdin": subprocess.PIPE},
        )
        self._reader = gevent.spawn(self._read)

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def _read(self) -> None:
        assert self.process is not None and self.process.stdout is not None
        stream = self.process.stdout
        try:
            while line := stream.readline(_MAX_LINE):
                self._line(line)
        except (OSError, ValueError):  # the pipe was closed under us: stop() is ending it
            pass

    def _line(self, raw: bytes) -> None:
        try:
            line = json.loads(raw)
        except ValueError:
            return  # not one of ours (a cut line at a kill): nothing to count
        if not isinstance(line, dict):
            return
        kind = line.get("kind")
        if kind == "sample":
            self._sample(line)
        elif kind == "failed":
            self._failed += 1
            self._slow += line.get("slow") is True
        elif kind == "note":
            self._note(str(line.get("message", "")))
        elif kind == "final":
            self._final = line

    def _sample(self, line: dict[str, Any]) -> None:
        self._samples += 1
        self._slow += line.get("slow") is True
        if isinstance(line.get("engine"), str):
            self._engine = line["engine"]
        self._reducer.add(line)
        self._gpu.add(line)
        previous, self._previous = self._previous, line
        if previous is None:
            return
        windows = [
            self._slowdown(w) if w.kind == GPU_THROTTLE else w
            for w in server_windows(previous, line)
        ]
        for window in windows:
            self._windows[window.kind] = self._windows.get(window.kind, 0) + 1
        if windows and self.on_windows is not None:
            try:
                self.on_windows(windows)
            except Exception:  # a consumer's bug must not end the sampling
                logger.exception("tpot-locust: server metrics: passing on windows failed")

    def _slowdown(self, window: CauseWindow) -> CauseWindow:
        """A throttle window sized by how much slower its clock ran than the highest this
        exporter showed in the run (a step's time x (1 + size)); 0 when not known."""
        highest = max(self._gpu.sm_clock_mhz, default=0.0)
        slowdown = highest / window.size - 1 if window.size > 0 and highest > 0 else 0.0
        return replace(window, size=round(max(slowdown, 0.0), 4))

    def _note(self, message: str) -> None:
        message = printable(message)
        if message and message not in self._notes:
            self._notes.append(message)
            logger.warning("tpot-locust: server metrics: %s", message)

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> None:
        """Close the child's stdin (it prints its final line and exits), wait up to
        ``timeout_s`` for that, then SIGTERM and kill. Cooperative; safe to call twice."""
        if self._stopped or self.process is None:
            self._stopped = True
            return
        self._stopped = True
        process = self.process
        deadline = time.monotonic() + timeout_s
        try:
            if process.stdin is not None:
                process.stdin.close()
        except OSError:
            pass
        if not _wait(process, deadline - time.monotonic()):
            _signal(process, signal.SIGTERM)
            if not _wait(process, 0.5):
                _signal(process, signal.SIGKILL)
                _wait(process, 5.0)
        if self._reader is not None:
            self._reader.join(max(0.1, deadline - time.monotonic()))  # the rest of its lines
            if not self._reader.dead:
                self._reader.kill(block=True, timeout=1.0)
        if process.stdout is not None:
            process.stdout.close()
        dropped = (self._final or {}).get("stdout_dropped")
        if isinstance(dropped, int) and dropped > 0:
            self._note(
                f"{dropped} lines came while this process was too busy to read them: "
                "their windows are missing (server_metrics.jsonl has them)"
            )
        if self._final is None:
            self._note(
                f"the sampler of {redact_url(self.url)} ended without its final line "
                f"(exit code {process.returncode})"
            )

    def summary(self) -> ServerMetrics:
        """``run["server_metrics"]`` of ``summary.json`` (see the module docstring); a DCGM
        exporter's (``run["gpu_metrics"][label]``) has ``gpu`` too."""
        final = self._final or {}
        gpu = self._gpu.summary()
        summary: ServerMetrics = {"gpu": gpu} if gpu is not None else {}
        summary.update(
            {
                "url": redact_url(self.url),
                "engine": self._engine if self._engine is not None else final.get("engine"),
                "interval_s": self.interval_s,
                "samples": self._samples,
                "slow": self._slow,
                "failed": self._failed,
                "notes": list(self._notes),
                "series": self._reducer.series(),
                "windows": dict(self._windows),
                "own_percentiles": final.get("own_percentiles") or {},
            }
        )
        return summary


def _wait(process: subprocess.Popen, timeout_s: float) -> bool:
    try:
        process.wait(max(0.0, timeout_s))
        return True
    except subprocess.TimeoutExpired:
        return False


def _signal(process: subprocess.Popen, signum: int) -> None:
    try:
        process.send_signal(signum)
    except OSError:  # gone already
        pass
