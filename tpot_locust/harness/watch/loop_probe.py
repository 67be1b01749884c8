"""The lag probe: when this process's event loop could not run, and for how long.

A repeating timer on gevent's loop whose lateness is the time the loop could not run
(``loop_lag``, one sample per tick). A tick later than the threshold reports a stall
window (from the previous tick, the last moment the loop was seen running, to this one)
to ``on_stall``: the recorder (``metrics.stalls``, ``metrics.recorder``) tags the samples
that overlap it. Here because it runs on gevent; what it measures is plain data.
"""

from __future__ import annotations

import sys
import time
import traceback
from array import array
from collections.abc import Callable
from typing import Any

from gevent import get_hub, monkey

from tpot_locust.common import env_vars
from tpot_locust.common.clock import stamp_ns

PROBE_INTERVAL_MS = 1.0
# Later than this, a probe tick marks a stall window. Normal lateness on an idle or
# moderately busy loop is below 1 ms (libev rounds its poll timeout up to whole ms).
DEFAULT_STALL_THRESHOLD_MS = 2.0


def stall_threshold_ms() -> float:
    return env_vars.number(env_vars.STALL_THRESHOLD_MS, DEFAULT_STALL_THRESHOLD_MS, 0.1, 10_000.0)


OnStall = Callable[[int, int], None]


class LagProbe:
    """A repeating timer on this process's gevent loop; lateness per tick, stalls."""

    def __init__(
        self, threshold_ms: float | None = None, interval_ms: float = PROBE_INTERVAL_MS
    ) -> None:
        self.interval_ns = int(interval_ms * 1e6)
        threshold = stall_threshold_ms() if threshold_ms is None else threshold_ms
        self.threshold_ns = int(threshold * 1e6)
        self.lags_ns: array[int] = array("q")  # drained by the recorder with each interval
        self.watched_ns = 0  # the time its ticks spanned, drained with the lags
        self._cpu_mark_ns = 0  # this process's CPU time when the lags were last taken
        self._cpu_banked_ns = 0  # spent from then to a stop, taken with the next lags
        self._on_stall: OnStall | None = None
        self._timer: Any = None
        self._last_ns = 0

    @property
    def running(self) -> bool:
        return self._timer is not None

    @property
    def last_tick_ns(self) -> int:
        """When the loop last ran this probe (the stamp clock, ``common.clock``)."""
        return self._last_ns

    def start(self, on_stall: OnStall) -> None:
        """Tick from now on, each stall handed to ``on_stall`` (the recorder's)."""
        if self._timer is not None:
            return
        self._on_stall = on_stall
        self._timer = get_hub().loop.timer(self.interval_ns / 1e9, self.interval_ns / 1e9)
        self._last_ns = stamp_ns()
        self._cpu_mark_ns = time.process_time_ns()
        self._timer.start(self._tick)

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.close()
            self._timer = None
            self._cpu_banked_ns += self._cpu_since_mark()

    def _tick(self) -> None:
        now = stamp_ns()
        last, self._last_ns = self._last_ns, now
        lag = now - last - self.interval_ns
        self.watched_ns += now - last
        self.lags_ns.append(lag if lag > 0 else 0)
        if lag > self.threshold_ns and self._on_stall is not None:
            self._on_stall(last, now)

    def take_lags(self) -> tuple[array[int], int, int]:
        """The lags since the last call, the time their ticks spanned and the CPU time this
        process spent meanwhile, every thread's (ns; none before the probe started)."""
        lags, self.lags_ns = self.lags_ns, array("q")
        watched, self.watched_ns = self.watched_ns, 0
        spent, self._cpu_banked_ns = self._cpu_banked_ns, 0
        if self.running:
            spent += self._cpu_since_mark()
        return lags, watched, spent

    def _cpu_since_mark(self) -> int:
        now_ns = time.process_time_ns()
        spent, self._cpu_mark_ns = now_ns - self._cpu_mark_ns, now_ns
        return max(spent, 0)


class StallTracer:
    """Prints where this process's loop is stuck while a stall goes on (``TPOT_STALL_TRACE=1``).

    A real OS thread (not a greenlet: a greenlet cannot run while the loop is held) looks at
    the probe's last tick every millisecond; when it is older than the threshold it prints
    the main thread's stack once per stall. The interpreter hands the thread the GIL every
    switch interval (5 ms), so stalls shorter than that may pass unseen.
    """

    def __init__(self, probe: LagProbe) -> None:
        self.probe = probe
        self._main = _original("_thread", "get_ident")()  # the loop's OS thread

    def start(self) -> None:
        _original("_thread", "start_new_thread")(self._watch, ())

    def _watch(self) -> None:
        sleep = _original("time", "sleep")
        reported = 0
        while True:
            sleep(0.001)
            last = self.probe.last_tick_ns
            held = stamp_ns() - last - self.probe.interval_ns
            if held > self.probe.threshold_ns and last != reported and self.probe.running:
                reported = last
                frame = sys._current_frames().get(self._main)
                stack = "".join(traceback.format_stack(frame, limit=12)) if frame else "?"
                print(
                    f"tpot-locust: loop held {held / 1e6:.1f} ms so far at\n{stack}",
                    file=sys.stderr,
                    flush=True,
                )


def _original(module: str, name: str) -> Any:
    """The function as it was before gevent patched it (a real thread, a real sleep)."""
    return monkey.get_original(module, name)
