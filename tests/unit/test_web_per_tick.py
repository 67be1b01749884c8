"""``webui.PerTick``: a live page is made again only once the totals it reads moved."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from tpot_locust.harness.web.webui import PerTick


def test_a_page_polled_back_to_back_is_made_once_an_interval() -> None:
    state: Any = SimpleNamespace(
        tests_started=1, running=True, collector=SimpleNamespace(last_tick_wall_s=100.0)
    )
    per_tick = PerTick(state)
    made: list[int] = []

    def make() -> int:
        made.append(1)
        return len(made)

    assert [per_tick.get("fragment", make) for _ in range(50)] == [1] * 50
    state.collector.last_tick_wall_s = 101.0  # an interval closed: the totals moved
    assert per_tick.get("fragment", make) == 2
    state.running = False  # the test ended: its last totals, no longer running
    assert per_tick.get("fragment", make) == 3
    state.tests_started = 2  # the next test's start
    assert per_tick.get("fragment", make) == 4
    assert per_tick.get("summary", make) == 5  # each page its own
    assert per_tick.get("fragment", make) == 4
