"""One request's ``prefill_window`` events (``harness.event_hooks``): fired at the send, and once
more at its first token (from the stream's read) or at its end without one."""

from __future__ import annotations

import time
from typing import Any

from tpot_locust.metrics.causes import FAILED_END as PREFILL_FAILED


class PrefillWindow:
    """One request's ``prefill_window`` events: opened now, closed at its first token."""

    __slots__ = ("_hook", "_prompt_tokens", "_request_id", "start_ns", "_burst", "_open")

    def __init__(self, hook: Any, request_id: str, prompt_tokens: int, burst: bool) -> None:
        self._hook, self._request_id, self._burst = hook, request_id, burst
        self._prompt_tokens = prompt_tokens
        self.start_ns = time.perf_counter_ns()
        self._open = True
        self._fire(None)

    def _fire(self, end_perf_ns: int | None) -> None:
        self._hook.fire(
            request_id=self._request_id,
            start_perf_ns=self.start_ns,
            end_perf_ns=end_perf_ns,
            prompt_tokens=self._prompt_tokens,
            burst=self._burst,
        )

    def first_token(self, stamp_ns: int) -> None:
        if self._open:
            self._open = False
            self._fire(stamp_ns)

    def end(self, first_stamp_ns: int | None) -> None:
        """The request ended: its first token if it had one (at the close), else none ran."""
        if self._open:
            self._open = False
            self._fire(PREFILL_FAILED if first_stamp_ns is None else first_stamp_ns)
