"""`tpot-locust sweep` against the simulator's engine, whose decode steps grow with the
batch: it stops at the first step whose TPOT p99 SLO fails and names the step before it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tests.conftest import ROOT, run_command


def test_a_sweep_stops_at_the_first_broken_slo_and_names_the_knee(tmp_path: Path) -> None:
    out = tmp_path / "sweep"
    result = run_command(
        [sys.executable, "-m", "tpot_locust", "sweep", str(ROOT / "scenarios/sweep.yaml"),
         "--out", str(out)],
        timeout=400,
    )  # fmt: skip
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    document = json.loads((out / "sweep.json").read_text())
    steps = document["steps"]
    # 4, 8, 16 users pass (TPOT ~13, 21, 37 ms); 32 (~69 ms) breaks p99 <= 55 ms; 64 never runs
    assert [step["value"] for step in steps] == [4, 8, 16, 32], output[-3000:]
    assert [step["verdict"] for step in steps] == ["pass", "pass", "pass", "fail"], steps
    assert [name.split(" <=")[0] for name in steps[-1]["failed"]] == ["tpot p99"]
    assert document["knee"] == {"step": 3, "value": 16}
    assert document["stopped_because"].startswith("step 4 is fail: tpot p99")
    tpot = [step["tpot"]["p99"] for step in steps]
    assert tpot == sorted(tpot) and tpot[-1] > 55 >= tpot[-2]  # TPOT grew with the load
    for step in steps:  # one whole run per step, in its own folder
        folder = out / step["dir"]
        assert (folder / "summary.json").exists() and (folder / "verdict.json").exists()
        assert step["tokens_per_s"] > 0 and step["requests_ok"] > 0
    assert steps[-1]["tokens_per_s"] > steps[0]["tokens_per_s"]  # more load, more tokens
    page = (out / "sweep.html").read_text()
    assert page.count("<svg") == 3 and "knee" in page
    assert "knee: users 16 (step 3)" in result.stdout
