"""Quiet runs raise no alarm (issue 30): with every stamp recovered nothing is tagged or
set aside, no stall warning is printed, and 32 streams at 3 ms (~10k events/s, a light load)
is not a busy client."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import ROOT, run_command
from tpot_locust.common.clock import SEGMENT_CLOCK
from tpot_locust.wire.segment_stamps import arrival_clock


@pytest.mark.parametrize(
    "scenario", ["scenarios/quickstart.yaml", "tests/scenarios/tail_truth.yaml"]
)
def test_a_quiet_run_tags_nothing_and_warns_of_nothing(
    tmp_path: Path, python: str, scenario: str
) -> None:
    out = tmp_path / "out"
    result = run_command(
        [
            python,
            "-m",
            "tpot_locust",
            "run",
            str(ROOT / scenario),
            "--run-time",
            "10s",
            "--out",
            str(out),
        ],
        timeout=180,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    client, tpot = summary["client"], summary["metrics"]["tpot"]
    assert client["busy"] is False, client
    said = result.stdout + (out / "report.txt").read_text()  # the first screen, the full report
    assert "! client busy" not in said and "! busy workers" not in said
    if arrival_clock() != SEGMENT_CLOCK:
        pytest.skip("no segment tap here (needs CAP_NET_RAW): the kernel clock's rules tag")
    assert client["arrival_clocks"].keys() == {SEGMENT_CLOCK}, client["arrival_clocks"]
    assert tpot["client_stall"] == {"count": 0}
    assert "! client stalls" not in said and " in stalls" not in said
    assert "stall-free" not in said
    check = summary["truth_check"]["metrics"]["tpot"]
    assert all(abs(check[key]["error"]) <= 0.1 for key in ("p50", "p90", "p99")), check
