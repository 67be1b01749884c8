"""Lag probes and CPU pinning for the benchmarks: how late this process gets to readable
data, and keeping the simulator off the client's core."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import gevent
import numpy as np

PROBE_SLEEP_S = 0.001


# CPU pinning (``--no-pin`` turns it off): this client on the last core, the simulator and
# the I/O-lag writer on the others. On a shared 2-core VM this cut the client's run-queue
# wait from ~7 % to ~1 % of the time and the p99 error at 16 streams by about half.
_pinning: tuple[set[int], set[int]] | None = None


def set_pinning(enabled: bool) -> None:
    global _pinning
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    if enabled and len(cpus) >= 2:
        _pinning = ({cpus[-1]}, set(cpus[:-1]))
        os.sched_setaffinity(0, _pinning[0])
    else:
        _pinning = None


def pin_other(pid: int) -> None:
    """Keep a helper process (simulator, probe writer) off the client's core."""
    if _pinning is not None:
        try:
            os.sched_setaffinity(pid, _pinning[1])
        except OSError:
            pass


def pinning_note() -> str:
    if _pinning is None:
        return "not pinned"
    return (
        f"client pinned to CPU {min(_pinning[0])}, simulator and probe writer to "
        f"CPU {','.join(str(c) for c in sorted(_pinning[1]))}"
    )


class HubLagProbe:
    """A greenlet sleeping ``PROBE_SLEEP_S`` in a loop; records how late each wake-up is.

    On gevent's default libev loop this reads up to ~1 ms high with no work at all: when
    other I/O wakes the loop just before a timer is due, libev's epoll backend still waits
    at least 1 ms (``backend_mintime``) unless more I/O comes. ``IOLagProbe`` measures the
    delay a stamp actually suffers."""

    def __init__(self) -> None:
        self.lags_ns: list[int] = []
        self._running = False
        self._greenlet: gevent.Greenlet | None = None

    def start(self) -> None:
        self._running = True
        self._greenlet = gevent.spawn(self._loop)

    def _loop(self) -> None:
        sleep_ns = int(PROBE_SLEEP_S * 1e9)
        lags = self.lags_ns
        while self._running:
            before = time.perf_counter_ns()
            gevent.sleep(PROBE_SLEEP_S)
            lags.append(time.perf_counter_ns() - before - sleep_ns)

    def stop(self) -> np.ndarray:
        self._running = False
        if self._greenlet is not None:
            self._greenlet.join()
        return np.asarray(self.lags_ns, dtype=np.int64)


_IO_WRITER = """
import os, sys, time
period = float(sys.argv[1])
while True:
    os.write(1, time.perf_counter_ns().to_bytes(8, "little"))
    time.sleep(period)
"""


class IOLagProbe:
    """I/O lag: the delay between data becoming readable and a greenlet here reading it.

    A child process writes its ``perf_counter_ns`` to a pipe every ``PROBE_SLEEP_S``; a
    greenlet reads it and records (now - written). That is the delay a token event's stamp
    suffers (readiness -> the reading greenlet runs), without the timer slack of
    ``HubLagProbe``. Both clocks are CLOCK_MONOTONIC, shared by the machine's processes."""

    def __init__(self) -> None:
        self.lags_ns: list[int] = []
        self._process: subprocess.Popen[bytes] | None = None
        self._greenlet: gevent.Greenlet | None = None

    def start(self) -> None:
        self._process = subprocess.Popen(
            [sys.executable, "-c", _IO_WRITER, str(PROBE_SLEEP_S)], stdout=subprocess.PIPE
        )
        pin_other(self._process.pid)
        assert self._process.stdout is not None
        fd = self._process.stdout.fileno()
        os.set_blocking(fd, False)
        self._greenlet = gevent.spawn(self._loop, fd)

    def _loop(self, fd: int) -> None:
        from gevent.os import nb_read

        lags = self.lags_ns
        pending = b""
        while True:
            data = nb_read(fd, 4096)
            now = time.perf_counter_ns()
            if not data:
                return
            pending += data
            whole = len(pending) - len(pending) % 8
            for offset in range(0, whole, 8):
                lags.append(now - int.from_bytes(pending[offset : offset + 8], "little"))
            pending = pending[whole:]

    def stop(self) -> np.ndarray:
        if self._process is not None:
            self._process.terminate()
            self._process.wait()
        if self._greenlet is not None:
            self._greenlet.join(timeout=2)
            self._greenlet.kill()
        return np.asarray(self.lags_ns, dtype=np.int64)


def sched_s(pid: int | str = "self") -> tuple[float, float]:
    """(seconds on a CPU, seconds runnable but waiting for one) of a process's main thread,
    from Linux ``/proc/PID/schedstat``; the wait shows a machine too busy to measure on."""
    try:
        running, waiting = Path(f"/proc/{pid}/schedstat").read_text().split()[:2]
    except (OSError, ValueError):
        return 0.0, 0.0
    return int(running) / 1e9, int(waiting) / 1e9
