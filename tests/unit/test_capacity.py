"""Guidance: the token events/s a scenario asks for, and the run-start warning."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tpot_locust.scenario.capacity import (
    AUTO_WORKERS,
    DEFAULT_ASSUMED_GAP_MS,
    EVENTS_PER_S_BY_CLOCK,
    EVENTS_PER_S_PER_WORKER,
    SIMULATOR_EVENTS_PER_S,
    Demand,
    advice,
    auto_workers,
    demand,
    expected_events_per_s,
    scenario_gap_ms,
    workers_needed,
)
from tpot_locust.scenario.loader import load_scenario
from tpot_locust.scenario.model import Scenario


def scenario(tmp_path: Path, text: str) -> Scenario:
    path = tmp_path / "s.yaml"
    path.write_text(textwrap.dedent(text))
    return load_scenario(path)


def closed(tmp_path: Path, users: int, extra: str = "", top: str = "") -> Scenario:
    return scenario(
        tmp_path,
        f"""
        name: t
        duration: 60s
        {top}
        classes:
          chat:
            users: {users}
            output_tokens: 100
            {extra}
        """,
    )


def test_closed_loop_streams_all_the_time_without_pauses(tmp_path: Path) -> None:
    s = closed(tmp_path, 10)
    assert expected_events_per_s(s, assumed_gap_ms=5) == pytest.approx(10 * 200)
    assert demand(s, assumed_gap_ms=5).streams == pytest.approx(10)


def test_think_and_wait_time_lower_the_streaming_share(tmp_path: Path) -> None:
    # 2 turns x 100 tokens x 10 ms = 2 s streaming, 1 s thinking, 1 s between sessions.
    s = closed(tmp_path, 10, "turns: 2\n            think_time: 1\n            wait_time: 1")
    assert expected_events_per_s(s, assumed_gap_ms=10) == pytest.approx(10 * 0.5 * 100)


def test_distribution_means_are_used(tmp_path: Path) -> None:
    s = scenario(
        tmp_path,
        """
        duration: 60s
        classes:
          chat:
            users: 4
            output_tokens: {dist: uniform, min: 100, max: 300}
            turns: 2
            think_time: {dist: exponential, mean: 2}
        """,
    )
    # 2 x 200 tokens x 5 ms = 2 s streaming, one 2 s think: half the time.
    assert expected_events_per_s(s, assumed_gap_ms=5) == pytest.approx(4 * 0.5 * 200)


def test_open_loop_rate_times_tokens_capped_by_max_in_flight(tmp_path: Path) -> None:
    text = """
        duration: 60s
        classes:
          arrivals:
            rate: {rate}
            max_in_flight: 10
            output_tokens: {{dist: uniform, min: 100, max: 300}}
            turns: 2
        """
    slow = scenario(tmp_path, text.format(rate=2))
    assert expected_events_per_s(slow, assumed_gap_ms=5) == pytest.approx(2 * 2 * 200)
    flood = scenario(tmp_path, text.format(rate=1000))
    assert expected_events_per_s(flood, assumed_gap_ms=5) == pytest.approx(10 * 200)


def test_stages_take_the_peak_and_share_users_by_weight(tmp_path: Path) -> None:
    s = scenario(
        tmp_path,
        """
        classes:
          a: {users: 3, output_tokens: 100}
          b: {users: 1, output_tokens: 100}
          o: {rate: 1, output_tokens: 100}
        stages:
          - {duration: 10s, users: 8}
          - {duration: 10s, rate: {o: 50}}
          - {duration: 10s, users: 2, rate: {o: 5}}
        """,
    )
    d = demand(s, assumed_gap_ms=10)
    # Stage 2: users stay at 8 (6 a + 2 b, 100 events/s each), o at 50/s x 100 tokens.
    assert d.by_class == pytest.approx({"a": 600, "b": 200, "o": 5000})
    assert d.events_per_s == pytest.approx(5800)


def test_largest_burst_streams_on_top(tmp_path: Path) -> None:
    s = closed(
        tmp_path,
        2,
        top="bursts:\n          - {class: chat, count: 8, at: [5s]}\n"
        "          - {class: chat, count: 3, at: [9s]}",
    )
    assert expected_events_per_s(s, assumed_gap_ms=10) == pytest.approx((2 + 8) * 100)


def test_assumed_gap_comes_from_the_simulator_unless_a_host_serves(tmp_path: Path) -> None:
    sim = closed(tmp_path, 1, top="simulator: {gap_ms: {dist: lognormal, mean: 4, stddev: 2}}")
    assert scenario_gap_ms(sim) == 4
    assert scenario_gap_ms(sim, host="http://127.0.0.1:8000") == DEFAULT_ASSUMED_GAP_MS
    hosted = closed(tmp_path, 1, top="server: {host: 'http://127.0.0.1:8000'}")
    assert scenario_gap_ms(hosted) == DEFAULT_ASSUMED_GAP_MS
    assert scenario_gap_ms(closed(tmp_path, 1)) == 2.0  # the simulator's default gap
    with pytest.raises(ValueError):
        demand(sim, assumed_gap_ms=0)


def test_workers_needed_rounds_up() -> None:
    s = Scenario(source=str(ROOT / "x.yaml"), name="x", duration_s=60, classes=[])
    assert workers_needed(s) == 1
    assert Demand(EVENTS_PER_S_PER_WORKER * 2.5, 5.0).workers_needed() == 3
    assert Demand(EVENTS_PER_S_PER_WORKER, 5.0).workers_needed() == 1


def test_advice_is_silent_within_capacity(tmp_path: Path) -> None:
    host = "http://127.0.0.1:8000"
    s = closed(tmp_path, 8)
    assert advice(s, 0, host=host, assumed_gap_ms=5, cpus=2) is None
    assert advice(s, 4, host=host, assumed_gap_ms=5, cpus=16) is None


def test_advice_names_the_workers_needed(tmp_path: Path) -> None:
    host = "http://127.0.0.1:8000"
    users = int(EVENTS_PER_S_PER_WORKER * 2.5 * 5 / 1000)  # 2.5 workers' worth at 5 ms
    s = closed(tmp_path, users)
    line = advice(s, 1, host=host, assumed_gap_ms=5, cpus=16)
    assert line is not None and "\n" not in line
    assert line.startswith("tpot-locust: warning:")
    assert "--workers 3" in line and "1 worker process stamps" in line
    assert advice(s, 3, host=host, assumed_gap_ms=5, cpus=16) is None
    # Local workers beyond the cores add nothing.
    crowded = advice(s, 4, host=host, assumed_gap_ms=5, cpus=2)
    assert crowded is not None and "only 2 with a core" in crowded
    assert "Distributed runs" in crowded


def test_advice_warns_about_the_embedded_simulator(tmp_path: Path) -> None:
    users = int(SIMULATOR_EVENTS_PER_S * 1.5 * 2 / 1000)  # 1.5x the simulator at 2 ms
    s = closed(tmp_path, users)
    line = advice(s, 64, cpus=128)  # enough workers: only the simulator is short
    assert line is not None and "embedded simulator" in line and "--workers" not in line
    assert advice(s, 64, host="http://127.0.0.1:8000", assumed_gap_ms=2, cpus=128) is None


@pytest.mark.parametrize("path", sorted((ROOT / "scenarios").glob("*.yaml")), ids=lambda p: p.name)
def test_shipped_scenarios_have_a_finite_demand(path: Path) -> None:
    d = demand(load_scenario(path))
    assert 0 < d.events_per_s < 1e7
    assert d.workers_needed() >= 1


def test_workers_auto_takes_a_core_each_less_the_masters_and_the_simulators(tmp_path: Path) -> None:
    s = closed(tmp_path, 8)
    host = "http://127.0.0.1:8000"
    assert auto_workers(s, host, cpus=16) == (
        15,
        "tpot-locust: --workers auto: 15 worker processes (16 cores, 1 kept for the master)",
    )
    workers, how = auto_workers(s, None, cpus=16)  # the embedded simulator takes one more
    assert workers == 14 and "2 kept for the master and the embedded simulator" in how
    workers, how = auto_workers(s, None, cpus=2)  # this machine: one process is the most
    assert workers == 0 and "one local process (2 cores" in how
    assert auto_workers(s, host, cpus=3)[0] == 2


def test_the_workers_option_takes_a_count_or_auto() -> None:
    import argparse

    from tpot_locust.cli.main import WORKERS

    assert WORKERS("auto") == AUTO_WORKERS and WORKERS("4") == 4
    with pytest.raises(argparse.ArgumentTypeError):
        WORKERS("-1")


def test_advice_takes_the_capacity_of_the_clock_in_use(tmp_path: Path) -> None:
    """A process on the segment clock (bodies read in batches) stamps more than one on the
    kernel clock: the warning is the measured figure of the clock the run stamps on."""
    host = "http://127.0.0.1:8000"
    kernel, segment = EVENTS_PER_S_BY_CLOCK["kernel"], EVENTS_PER_S_BY_CLOCK["segment"]
    assert segment > kernel
    users = int((kernel + segment) / 2 * 5 / 1000)  # between the two at 5 ms
    s = closed(tmp_path, users)
    line = advice(s, 0, host=host, assumed_gap_ms=5, cpus=16, clock="kernel")
    assert line is not None and f"~{kernel:,} token events/s truthfully on the kernel" in line
    assert advice(s, 0, host=host, assumed_gap_ms=5, cpus=16, clock="segment") is None
    more = closed(tmp_path, int(segment * 2.5 * 5 / 1000))
    line = advice(more, 1, host=host, assumed_gap_ms=5, cpus=16, clock="segment")
    assert line is not None and "--workers 3" in line and "segment clock" in line


def test_auto_workers_count_the_cpus_this_process_may_use_not_the_machines() -> None:
    """Issue 57, item 7: a 2-core cpuset on a 64-core node would have started 62 workers."""
    import subprocess
    import sys

    code = "from tpot_locust.scenario.capacity import usable_cpus; print(usable_cpus())"
    pinned = subprocess.run(
        ["taskset", "-c", "0", sys.executable, "-c", code], capture_output=True, text=True
    )
    assert pinned.returncode == 0, pinned.stderr
    assert pinned.stdout.strip() == "1"


def test_compare_refuses_a_list_that_names_no_metric() -> None:
    """``compare --metrics ,`` gated nothing and exited 0 (issue 57, item 7)."""
    import pytest

    from tpot_locust.report.compare import DEFAULT_METRICS, LATENCY_METRICS, parse_choices

    for given in (",", " , ,"):
        with pytest.raises(ValueError, match="names none"):
            parse_choices(given, LATENCY_METRICS, DEFAULT_METRICS, "metrics")
