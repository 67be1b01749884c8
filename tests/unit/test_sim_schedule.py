"""The simulator against its own schedule (``truth_check["schedule"]``): its token events of
the window that left over ``LATE_AFTER_NS`` after they were due (the truth's ``late_us``),
and the one rule that calls it behind."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.unit.test_first_screen import summary_of, truth
from tests.unit.test_sim_prometheus import MS, FakeConn, FakeTruth, fake_clock  # noqa: F401
from tpot_locust.common.clock import WallClock
from tpot_locust.common.run_facts import NO_FACTS, RunFacts
from tpot_locust.common.sim_schedule import BEHIND_SHARE, LATE_AFTER_NS, simulator_behind
from tpot_locust.report.first_screen import WIDTH, first_screen
from tpot_locust.report.gate import run_validity
from tpot_locust.report.summary_types import Summary
from tpot_locust.report.truth_check import format_truth_check, truth_check
from tpot_locust.sim.engine import Seq
from tpot_locust.sim.engine_stream import EngineStream
from tpot_locust.sim.prometheus import SimMetrics
from tpot_locust.sim.request import SimRequest
from tpot_locust.sim.response import ResponseSetup

START_NS = 10**9
FIGURES = dict.fromkeys(("p50", "p90", "p99", "p99.9", "p99.99", "max"), 2.0)


def write_truth(path: Path, late_of: dict[int, list[list[int]] | None]) -> None:
    """Ten requests of 101 events 2 ms apart, all inside a window from START_NS + 1 s;
    request 0's first 50 events before it; ``late_of``: each request's ``late_us``."""
    lines = []
    for index in range(10):
        first = START_NS + 10**9 + (-100 if index == 0 else 20) * 10**6
        record = {
            "request_id": f"r{index}",
            "arrival_ns": first - 20 * 10**6,
            "send_ns": [first + k * 2 * 10**6 for k in range(101)],
            "tokens": [1] * 101,
            "aborted": False,
        }
        if (late := late_of.get(index, [])) is not None:
            record["late_us"] = late
        lines.append(record)
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))


def checked(path: Path) -> Summary:
    summary: Summary = {  # type: ignore[typeddict-item]
        "metrics": {
            "tpot": {"count": 1000, **FIGURES},
            "itl": {"count": 1000, **FIGURES},
            "ttft": {"count": 10, **dict.fromkeys(FIGURES, 20.0)},
        },
        "run": RunFacts(window_wall_ns=[START_NS + 10**9, START_NS + 10 * 10**9]),
    }
    summary["truth_check"] = truth_check(summary, path)
    return summary


def test_only_the_windows_late_events_count(tmp_path: Path) -> None:
    path = tmp_path / "truth.jsonl"
    # request 0: 40 late events before the window, 2 inside (events 60 and 70); request 1: 3
    late = [[k, 30_000] for k in range(40)] + [[60, 2_500], [70, 9_000]]
    write_truth(path, {0: late, 1: [[0, 2_100], [1, 2_200], [100, 2_300]]})
    schedule = checked(path)["truth_check"]["schedule"]
    assert schedule is not None
    # request 0 has 51 events inside (50 to 100), the nine others all 101
    assert schedule["events"] == 51 + 9 * 101
    assert schedule["late"] == 5 and schedule["late_max_ms"] == 9.0
    assert schedule["late_after_ms"] == LATE_AFTER_NS / 1e6
    assert schedule["behind"] is False
    lines = format_truth_check(checked(path)["truth_check"])
    assert any("the simulator's own schedule: 0.5% of its 960 token events" in s for s in lines)
    assert not any(line.startswith("! simulator behind") for line in lines)


def test_a_simulator_late_with_a_tenth_of_its_events_is_behind(tmp_path: Path) -> None:
    path = tmp_path / "truth.jsonl"
    late = {index: [[k, 4_000 + k] for k in range(11, 101)] for index in range(1, 10)}
    write_truth(path, late)
    summary = checked(path)
    schedule = summary["truth_check"]["schedule"]
    assert schedule is not None and schedule["behind"] is True
    assert schedule["late"] == 9 * 90 and schedule["late_max_ms"] == 4.1
    report = format_truth_check(summary["truth_check"])
    assert any(line.startswith("! simulator behind: 84.4% of its token events") for line in report)
    # the first screen says it too, beside the truth check's line
    screen_summary = summary_of()
    screen_summary["truth_check"] = {**truth(0.01, None, None), "schedule": schedule}
    screen = first_screen(screen_summary)
    assert any(line.startswith("! simulator behind: 84.4%") for line in screen)
    assert max(map(len, screen)) <= WIDTH


def test_a_truth_without_late_us_has_no_schedule(tmp_path: Path) -> None:
    """An older simulator's truth says nothing of its schedule: no figure, not a zero."""
    path = tmp_path / "truth.jsonl"
    write_truth(path, dict.fromkeys(range(10)))
    summary = checked(path)
    assert summary["truth_check"]["schedule"] is None
    assert not any("own schedule" in line for line in format_truth_check(summary["truth_check"]))
    plain: Summary = {**summary, "run": NO_FACTS}  # type: ignore[typeddict-item]
    assert truth_check(plain, path)["schedule"] is None


def test_the_rule() -> None:
    assert not simulator_behind(0, 0)
    assert not simulator_behind(10, 100) and simulator_behind(11, 100)
    assert BEHIND_SHARE == 0.10


def test_a_malformed_late_us_says_nothing_and_breaks_nothing(tmp_path: Path) -> None:
    """A hand-edited truth: pairs out of range are not counted, a list not of pairs is
    ignored; the events still count and the check still runs."""
    path = tmp_path / "truth.jsonl"
    write_truth(path, {1: [[-1, 9_000], [101, 9_000], [5, 3_000]], 2: [["x", 1]], 3: [[1]]})
    schedule = checked(path)["truth_check"]["schedule"]
    assert schedule is not None
    assert schedule["events"] == 960 and schedule["late"] == 1 and schedule["late_max_ms"] == 3.0


def engine_stream(rid: str, tokens: int, stream: bool) -> EngineStream:
    """An engine-mode response on a fake connection (``test_sim_prometheus``'s)."""
    request = SimRequest(
        rid, "chat", "m", 12, tokens, 0, True, stream, False, False, 0, tokens, "length"
    )
    setup = ResponseSetup(WallClock(), FakeTruth(), True, rid, lambda *a: None, SimMetrics("m"))
    response = EngineStream(FakeConn(), request, setup, Seq(rid, 0, 12, tokens))
    response.start()
    return response


@pytest.mark.parametrize("stream", [True, False])
def test_each_late_event_is_named_with_its_lateness(
    fake_clock: list[int],  # noqa: F811 (test_sim_prometheus's fixture)
    stream: bool,
) -> None:
    """Engine mode on a fake clock: an event late by more than LATE_AFTER_NS is listed,
    to the microsecond; one within it is not; a non-streaming answer is one event."""
    response = engine_stream("r", 4, stream)
    start = fake_clock[0]
    lateness_us = [0, 2_000, 2_001, 30_500]  # the third and fourth: late
    for step, late_us in enumerate(lateness_us):
        due = start + step * 2 * MS
        fake_clock[0] = due + late_us * 1000
        response.emit(step, due)
    record = response.truth_record(aborted=False)
    if stream:
        assert record["late_us"] == [[2, 2_001], [3, 30_500]]
    else:  # the body went out with the last token, 30.5 ms after that step's end
        assert record["late_us"] == [[0, 30_500]]


def _with_kernel_sends(path: Path, kernel_sends: dict[int, int]) -> None:
    """The truth of ``write_truth`` with each request's ``kernel_sends`` (default all 101)."""
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    for index, line in enumerate(lines):
        line["kernel_sends"] = kernel_sends.get(index, 101)
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))


def test_writes_sent_at_once_are_counted_and_a_held_server_invalidates_a_gated_run(
    tmp_path: Path,
) -> None:
    path = tmp_path / "truth.jsonl"
    write_truth(path, {})
    _with_kernel_sends(path, {3: 101 - 5})  # 5 of 1,010 held: 99.5 %, on the line
    schedule = checked(path)["truth_check"]["schedule"]
    assert schedule is not None
    assert schedule["sent_at_once"] == 1005 and schedule["sent_at_once_share"] == 0.995
    assert schedule["client_held"] is False
    _with_kernel_sends(path, {3: 101 - 6})  # one more: under 99.5 %
    summary = checked(path)
    schedule = summary["truth_check"]["schedule"]
    assert schedule is not None and schedule["client_held"] is True
    lines = format_truth_check(summary["truth_check"])
    assert any(line.startswith("! client held the server: only 99.4%") for line in lines)
    assert any("client held the server" in reason for reason in run_validity(summary))
    screen_summary = summary_of()
    screen_summary["truth_check"] = {**truth(0.01, None, None), "schedule": schedule}
    screen = first_screen(screen_summary)
    assert any(line.startswith("! client held the server") for line in screen)
    assert max(map(len, screen)) <= WIDTH


def test_a_truth_without_kernel_stamps_says_nothing_of_holding(tmp_path: Path) -> None:
    """``--truth-loop-sends`` (or an older simulator): no kernel stamp at all is not a
    server held on every write."""
    path = tmp_path / "truth.jsonl"
    write_truth(path, {})
    _with_kernel_sends(path, dict.fromkeys(range(10), 0))
    schedule = checked(path)["truth_check"]["schedule"]
    assert schedule is not None
    assert schedule["client_held"] is None and schedule["sent_at_once_share"] is None
