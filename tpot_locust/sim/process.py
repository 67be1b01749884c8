"""Start the simulator as a subprocess (tests, examples): wait for its ready line, stop it.

A real process keeps the simulator's event loop off the test's (or Locust's gevent) loop and
exercises the same CLI users run.
"""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
from pathlib import Path
from types import TracebackType
from typing import Any

from ..common.child_process import child_options
from .cli import READY_PREFIX
from .truth import read_truth

_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (Linux /proc): what the simulator (or its client) spent."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def machine_busy_seconds() -> float:
    """CPU seconds all CPUs spent neither idle nor in iowait since boot (Linux /proc): with
    ``cpu_seconds``, how busy other processes kept the machine while timing was measured."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(fields[:8]) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


class SimulatorError(RuntimeError):
    """The simulator exited or did not become ready in time."""


class SimProcess:
    """A running simulator subprocess; ``url`` is its base URL (no trailing slash)."""

    def __init__(
        self,
        process: subprocess.Popen[str],
        url: str,
        truth_path: Path | None,
        reader: threading.Thread | None = None,
    ) -> None:
        self.process = process
        self.url = url
        self.truth_path = truth_path
        self._reader = reader

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    @property
    def host(self) -> str:
        return self.url.split("://", 1)[1].rsplit(":", 1)[0].strip("[]")

    def read_truth(self) -> list[dict[str, object]]:
        """Truth lines flushed so far (the server flushes at least every 100 ms)."""
        if self.truth_path is None:
            raise SimulatorError("simulator was started without a truth file")
        return read_truth(self.truth_path)

    def stop(self, timeout_s: float = 10.0) -> int:
        """SIGTERM (the server flushes truth and exits 0), kill if it hangs; the exit code."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self._reader is not None:
            self._reader.join(timeout=1.0)  # it sees EOF now; close only after it is done
        reader_done = self._reader is None or not self._reader.is_alive()
        if reader_done and self.process.stdout is not None:
            self.process.stdout.close()
        return self.process.returncode

    def __enter__(self) -> SimProcess:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def _drain(stream: Any, lines: queue.Queue[str | None]) -> None:
    # Keeps reading so the child never blocks on a full stdout pipe.
    for line in stream:
        lines.put(line)
    lines.put(None)


def start_simulator(
    *args: str,
    truth: Path | None = None,
    host: str = "127.0.0.1",
    timeout_s: float = 20.0,
    env: dict[str, str] | None = None,
) -> SimProcess:
    """Run ``python -m tpot_locust.sim --port 0 [args...]`` and wait for it to listen.

    ``args`` are extra CLI flags (e.g. ``"--gap-ms", "2"``); they come after the defaults, so
    they may override ``--host``/``--port``.
    """
    command = [sys.executable, "-m", "tpot_locust.sim", "--host", host, "--port", "0"]
    if truth is not None:
        command += ["--truth", str(truth)]
    command += list(args)
    child_env = dict(os.environ) if env is None else dict(env)
    child_env["PYTHONPATH"] = os.pathsep.join(
        p for p in (_PACKAGE_ROOT, child_env.get("PYTHONPATH", "")) if p
    )
    child_env.setdefault("PYTHONUNBUFFERED", "1")
    # its own process group, dying with us: a Ctrl-C must not stop it before the client
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, text=True, env=child_env, **child_options()
    )
    lines: queue.Queue[str | None] = queue.Queue()
    reader = threading.Thread(target=_drain, args=(process.stdout, lines), daemon=True)
    reader.start()
    try:
        while True:
            line = lines.get(timeout=timeout_s)
            if line is None:
                code = process.wait()
                raise SimulatorError(f"simulator exited with {code} before it was ready")
            if line.startswith(READY_PREFIX):
                url = line[len(READY_PREFIX) :].strip()
                return SimProcess(process, url, truth, reader)
    except queue.Empty:
        process.kill()
        process.wait()
        raise SimulatorError(f"simulator not ready within {timeout_s} s") from None
    except BaseException:
        if process.poll() is None:
            process.kill()
            process.wait()
        raise
