"""Run phases: warm-up/cool-down by time, and the burst phase, a view of the cause timeline.

A token gap is in the ``burst`` phase when it overlaps the prefill window (send to first
token, ``metrics.causes``) of a scheduled burst request or of any request whose prompt is
at least ``causes.LONG_PROMPT_TOKENS`` long, from any process; else ``steady``. A request
that failed before its first token made no prefill and opens no window. Gaps are tagged a
little after their request finished (``TAG_HOLD_S``) so windows reported by other
processes have arrived; wall-clock times (ns since the epoch) make windows comparable
across processes.
"""

from __future__ import annotations

from dataclasses import dataclass

STEADY = "steady"
BURST = "burst"
PHASES = (STEADY, BURST)
TAG_HOLD_S = 2.0


NO_END_NS = 2**63 - 1  # a window the run's stop has not closed yet


@dataclass
class RunClock:
    """The run's shared timeline (wall ns): its measured window (docs/metrics.md, "The
    window"), from the warm-up's end to the cool-down's start or the stop, whichever came
    first; and the requests whose whole-request figures count."""

    start_wall_ns: int
    duration_s: float
    warmup_s: float = 0.0
    cooldown_s: float = 0.0

    def window_ns(self, stop_wall_ns: int | None = None) -> tuple[int, int]:
        """The window's start and end (wall ns), closed by ``stop_wall_ns`` if earlier."""
        start = self.start_wall_ns + int(self.warmup_s * 1e9)
        end = self.start_wall_ns + int((self.duration_s - self.cooldown_s) * 1e9)
        return start, end if stop_wall_ns is None else min(end, stop_wall_ns)

    def excluded(self, send_wall_ns: int, end_wall_ns: int) -> str | None:
        """``warmup`` if sent during warm-up, ``cooldown`` if it ended in the cool-down."""
        if self.warmup_s and send_wall_ns < self.start_wall_ns + self.warmup_s * 1e9:
            return "warmup"
        cooldown_from = self.start_wall_ns + (self.duration_s - self.cooldown_s) * 1e9
        if self.cooldown_s and end_wall_ns > cooldown_from:
            return "cooldown"
        return None

    def to_dict(self) -> dict[str, float]:
        return dict(self.__dict__)
