"""A one-shot timer for an asyncio loop that fires within microseconds of its due time.

asyncio's own timers wake through ``epoll_wait``, whose timeout is in whole milliseconds and
rounded up, so ``call_at`` fires up to 1 ms late; an engine step of 5 ms would then be late by
0.5 ms on average. On Linux a ``timerfd`` (armed on CLOCK_MONOTONIC, the clock of
``time.perf_counter_ns``, at an absolute nanosecond time) is registered as a reader instead.
Waking a sleeping process still takes 0.1-0.5 ms on a virtual machine (measured on the 2-vCPU
development VM: p50 ~0.1 ms, p99 0.3-1.5 ms), so the timer is armed a little early and the
rest is spun on the clock (see ``PreciseTimer``). Elsewhere ``call_at`` is armed 1.2 ms
earlier still.
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import time
from collections.abc import Callable

CLOCK_MONOTONIC = 1
TFD_NONBLOCK = 0o4000
TFD_CLOEXEC = 0o2000000
TFD_TIMER_ABSTIME = 1
EARLY_NS = 1_200_000  # fallback: asyncio may wake up to 1 ms late, so aim earlier


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


def _perf_counter_is_monotonic() -> bool:
    info = time.get_clock_info("perf_counter")
    return "CLOCK_MONOTONIC" in info.implementation and "RAW" not in info.implementation


class _Timerfd:
    """timerfd_create / timerfd_settime through libc (Python < 3.13 has no os.timerfd_*)."""

    def __init__(self) -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        self._settime = libc.timerfd_settime
        self._settime.argtypes = [
            ctypes.c_int,
            ctypes.c_int,
            ctypes.POINTER(_Itimerspec),
            ctypes.c_void_p,
        ]
        create = libc.timerfd_create
        create.argtypes = [ctypes.c_int, ctypes.c_int]
        fd = create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC)
        if fd < 0:
            raise OSError(ctypes.get_errno(), "timerfd_create failed")
        self.fd = fd
        self._spec = _Itimerspec()

    def set_abs_ns(self, due_ns: int) -> None:
        """Fire at ``due_ns`` on CLOCK_MONOTONIC (0 disarms); a past time fires at once."""
        value = self._spec.it_value
        if due_ns <= 0:
            value.tv_sec, value.tv_nsec = 0, 0
        else:
            value.tv_sec, value.tv_nsec = divmod(due_ns, 1_000_000_000)
        if self._settime(self.fd, TFD_TIMER_ABSTIME if due_ns > 0 else 0, self._spec, None) < 0:
            raise OSError(ctypes.get_errno(), "timerfd_settime failed")

    def close(self) -> None:
        os.close(self.fd)


class PreciseTimer:
    """``arm(due_ns)`` (perf_counter_ns clock) calls ``callback()`` once, at that time.

    Waking a sleeping process takes 0.1-0.5 ms on a virtual machine, so the timer wakes
    ``lead`` early and spins on the clock for the rest. The lead adapts to the wake-up delays
    seen lately (about their p98 plus 50 us), never above ``max_lead_ns`` (0: no spinning).
    """

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        callback: Callable[[], None],
        max_lead_ns: int = 1_000_000,
    ) -> None:
        self._loop = loop
        self._callback = callback
        self._handle: asyncio.TimerHandle | None = None
        self._due: int | None = None
        self._target = 0
        self._max_lead = max(0, max_lead_ns)
        self.lead_ns = self._max_lead // 2
        self._delays: list[int] = []
        self._timerfd: _Timerfd | None = None
        if os.name == "posix" and _perf_counter_is_monotonic():
            try:
                self._timerfd = _Timerfd()
                loop.add_reader(self._timerfd.fd, self._on_timerfd)
            except (OSError, AttributeError, NotImplementedError):
                if self._timerfd is not None:
                    self._timerfd.close()
                self._timerfd = None

    @property
    def precise(self) -> bool:
        """True when backed by a timerfd (microsecond wake-ups without blocking the loop)."""
        return self._timerfd is not None

    def arm(self, due_ns: int) -> None:
        self._due = due_ns
        self._target = target = due_ns - self.lead_ns
        if self._timerfd is not None:
            self._timerfd.set_abs_ns(max(1, target))
            return
        if self._handle is not None:
            self._handle.cancel()
        delay_s = (target - EARLY_NS - time.perf_counter_ns()) / 1e9
        self._handle = self._loop.call_at(self._loop.time() + delay_s, self._on_wake)

    def cancel(self) -> None:
        self._due = None
        if self._timerfd is not None:
            self._timerfd.set_abs_ns(0)
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def close(self) -> None:
        self.cancel()
        if self._timerfd is not None:
            self._loop.remove_reader(self._timerfd.fd)
            self._timerfd.close()
            self._timerfd = None

    def _on_timerfd(self) -> None:
        assert self._timerfd is not None
        try:
            os.read(self._timerfd.fd, 8)
        except BlockingIOError:  # re-armed or cancelled after it expired: nothing due
            return
        self._on_wake()

    def _on_wake(self) -> None:
        self._handle = None
        due = self._due
        if due is None:
            return
        now = time.perf_counter_ns()
        if self._max_lead and self.precise:
            self._adapt(now - self._target)
        if now < due:
            if self._max_lead:
                clock = time.perf_counter_ns
                while clock() < due:
                    pass
            else:
                time.sleep((due - now) / 1e9)
        self._due = None
        self._callback()

    def _adapt(self, delay: int) -> None:
        delays = self._delays
        delays.append(delay)
        if len(delays) >= 64:
            delays.sort()
            self.lead_ns = min(self._max_lead, max(0, delays[-2]) + 50_000)
            delays.clear()
