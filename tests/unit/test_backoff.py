"""Backing off after failures, and the streak of one client error that stops a run."""

from __future__ import annotations

import logging
import random

import pytest

from tpot_locust.common.timings import RequestTimings
from tpot_locust.harness.users.failures import Backoff, ClientErrorStreak, likely_fix


def _failed(message: str, category: str = "http_4xx") -> RequestTimings:
    timings = RequestTimings("chat", "chat", "r", 0, 0)
    timings.error_category, timings.error_message = category, message
    return timings


def test_backoff_grows_with_jitter_and_a_success_resets_it() -> None:
    backoff = Backoff(random.Random(1))
    delays = [backoff.after(_failed("HTTP 500: boom", "http_5xx")) for _ in range(10)]
    assert 0.05 <= delays[0] <= 0.15
    assert all(0.5 * 5.0 <= d <= 1.5 * 5.0 for d in delays[7:])  # capped at 5 s
    assert backoff.after(RequestTimings("chat", "chat", "r", 0, 0)) == 0.0
    assert backoff.after(_failed("HTTP 500: boom", "http_5xx")) <= 0.15


def test_the_same_client_error_in_a_row_trips_once_with_the_fix() -> None:
    reasons: list[str] = []
    streak = ClientErrorStreak(reasons.append, limit=3)
    rejected = _failed("HTTP 422: Unrecognized request argument supplied: ignore_eos")
    streak.observe(rejected)
    streak.observe(RequestTimings("chat", "chat", "r", 0, 0))  # a success starts over
    for _ in range(2):
        streak.observe(rejected)
    streak.observe(_failed("HTTP 429: slow down"))  # not a client error: ignored
    assert not reasons
    for _ in range(5):
        streak.observe(rejected)
    assert len(reasons) == 1
    assert "ignore_eos: false" in reasons[0]
    assert "check the host" in likely_fix(404, "no route")


def test_the_first_refusal_names_the_fix_at_once(caplog: pytest.LogCaptureFixture) -> None:
    streak = ClientErrorStreak(lambda reason: None, limit=20)
    refusal = "HTTP 422: {'loc': ['body', 'ignore_eos'], 'msg': 'Extra inputs are not permitted'}"
    with caplog.at_level(logging.WARNING, logger="tpot_locust.harness.users.failures"):
        for _ in range(3):
            streak.observe(_failed(refusal))
    (warning,) = caplog.records  # once, at the first failure
    assert "server.ignore_eos: false" in warning.getMessage()
    assert "server.min_tokens: false" in warning.getMessage()
