"""A request's one deadline: first, idle and total limits, and which one a late read broke."""

from __future__ import annotations

from tpot_locust.wire.deadline import NEVER_NS, Deadline

MS = 1_000_000


def test_the_first_arrival_is_due_first_token_timeout_after_the_send() -> None:
    deadline = Deadline(first_s=0.5, idle_s=0.1, total_s=10)
    deadline.start(1000 * MS)
    assert deadline.at_ns == 1500 * MS
    assert deadline.end_ns == 11_000 * MS
    assert deadline.missed == "first"


def test_each_arrival_moves_it_by_the_idle_timeout_and_never_past_the_total() -> None:
    deadline = Deadline(first_s=0.5, idle_s=0.1, total_s=1)
    deadline.start(0)
    deadline.arrived(200 * MS)
    assert deadline.at_ns == 300 * MS and deadline.missed == "idle"
    deadline.arrived(950 * MS)
    assert deadline.at_ns == 1000 * MS and deadline.missed == "total"


def test_a_total_shorter_than_the_first_token_timeout_is_what_a_silent_server_breaks() -> None:
    deadline = Deadline(first_s=5, idle_s=1, total_s=2)
    deadline.start(0)
    assert deadline.at_ns == 2000 * MS and deadline.missed == "total"


def test_a_retried_send_starts_every_limit_again() -> None:
    deadline = Deadline(first_s=0.5, idle_s=0.1, total_s=1)
    deadline.start(0)
    deadline.arrived(100 * MS)
    deadline.start(2000 * MS)
    assert deadline.at_ns == 2500 * MS and deadline.missed == "first"


def test_per_read_has_no_overall_limit() -> None:
    deadline = Deadline.per_read(2)
    deadline.start(0)
    assert deadline.end_ns == NEVER_NS and deadline.at_ns == 2000 * MS
    deadline.arrived(10_000 * MS)
    assert deadline.at_ns == 12_000 * MS
    assert deadline.timeout_s(11_000 * MS) == 1.0
