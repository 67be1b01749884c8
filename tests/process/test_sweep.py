"""`tpot-locust sweep` against the simulator's engine, whose decode steps grow with the
batch: it stops at the first step whose TPOT p99 SLO fails and names the step before it."""

from __future__ import annotations

import json
import sys
import urllib.error
from pathlib import Path

import pytest

from tests.conftest import ROOT, run_command
from tests.helpers.distributed import free_port, start_web_cluster, stop_processes, wait_for_workers
from tests.process.test_web_ui import post, summary_now, wait_up
from tpot_locust.cli.embedded_simulator import simulator_args
from tpot_locust.metrics.histograms import histogram_stats
from tpot_locust.report.histograms_file import load_results
from tpot_locust.scenario.loader import load_scenario
from tpot_locust.sim.process import start_simulator
from tpot_locust.sim.profiles import check_engine


def test_a_sweep_stops_at_the_first_broken_slo_and_names_the_knee(tmp_path: Path) -> None:
    out = tmp_path / "sweep"
    result = run_command(
        [
            sys.executable,
            "-m",
            "tpot_locust",
            "sweep",
            str(ROOT / "scenarios/sweep.yaml"),
            "--out",
            str(out),
        ],
        timeout=400,
    )
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
    assert "SLO tpot p99 &lt;= 55 ms" in page  # the line the knee was found against
    assert "knee: users 16 (step 3)" in result.stdout
    # the sure knee: no higher than the knee, every gated figure's interval below its limit
    sure = document["sure_knee"]
    assert sure is None or sure["step"] <= 3, sure
    if sure is not None:
        low, high = steps[sure["step"] - 1]["tpot"]["ci95"]["p99"]
        assert low <= steps[sure["step"] - 1]["tpot"]["p99"] <= high <= 55
    assert "sure knee: " in result.stdout
    # the step over the SLO is the knee's far side, not a failed verdict (issue 46, item 5)
    assert "=== sweep step: over its SLOs: the knee's far side ===" in result.stdout
    assert "SLO verdict: FAIL" not in result.stdout


def test_a_sweep_drives_a_running_cluster_one_test_per_step(tmp_path: Path) -> None:
    scenario_path = ROOT / "scenarios/sweep.yaml"
    web_port = free_port()
    ui = f"http://127.0.0.1:{web_port}"
    scenario = load_scenario(scenario_path, check_engine=check_engine)
    with start_simulator(*simulator_args(scenario)) as sim:
        processes = start_web_cluster(
            ROOT / "locustfiles/scenario.py",
            sim.url,
            web_port,
            tmp_path / "m",
            2,
            5,
            env={"TPOT_SCENARIO": str(scenario_path)},
        )  # the cluster's master and workers, on the scenario locustfile
        try:
            wait_up(ui + "/")
            wait_for_workers(ui, 2)
            result = run_command(
                [
                    sys.executable,
                    "-m",
                    "tpot_locust",
                    "sweep",
                    str(scenario_path),
                    "--master-url",
                    ui,
                    "--out",
                    str(tmp_path / "sweep"),
                    "--set",
                    "sweep.start=16",
                    "--max-steps",
                    "2",
                ],
                timeout=300,
            )
            # a setting the running classes cannot take is refused with its reason, unstarted
            wait_for_workers(ui, 2)  # back a stop timeout after the last test
            with pytest.raises(urllib.error.HTTPError) as refusal:
                post(
                    ui + "/swarm",
                    {
                        "user_count": "2",
                        "spawn_rate": "2",
                        "run_time": "30s",
                        "tpot_set": "classes.other.users=2",
                    },
                )
            refused = json.loads(refusal.value.read())
            assert refusal.value.code == 400 and "chat, other" in refused["message"], refused
            assert summary_now(ui)["test"] == 2  # noqa: PLR2004
        finally:
            stop_processes(processes)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    document = json.loads((tmp_path / "sweep" / "sweep.json").read_text())
    steps = document["steps"]
    assert [step["value"] for step in steps] == [16, 32], output[-3000:]
    assert [step["verdict"] for step in steps] == ["pass", "fail"], steps
    assert document["knee"] == {"step": 1, "value": 16}
    for step, users in zip(steps, (16, 32), strict=True):
        summary = json.loads((tmp_path / "sweep" / step["dir"] / "summary.json").read_text())
        assert f"classes.chat.users={users}" in summary["run"]["settings"]  # reached the master
        workers = summary["workers"]
        assert summary["complete"] and workers["reported_in_full"] == 2, workers  # noqa: PLR2004
        # ... and its dispatcher: the test ran the step's users, on the two workers
        assert max(point["users"] for point in summary["timeseries"]) == users
        assert step["requests_ok"] > 0 and step["tokens_per_s"] > 0
        # the step's histograms came with it: its folder reports as a local step's does
        totals, _ = load_results(tmp_path / "sweep" / step["dir"])
        assert (
            histogram_stats(totals.groups["chat"].histograms["tpot"], ()).count
            == (summary["metrics"]["tpot"]["count"])
        )
        assert (tmp_path / "sweep" / step["dir"] / "report.html").exists()
    # the master kept each test's own results too
    assert (tmp_path / "m" / "summary.json").exists()
    assert (tmp_path / "m" / "test-2" / "summary.json").exists()
    assert "cannot change the classes" in refused["message"]


def test_a_sweep_names_a_master_it_cannot_reach(tmp_path: Path) -> None:
    result = run_command(
        [
            sys.executable,
            "-m",
            "tpot_locust",
            "sweep",
            str(ROOT / "scenarios/sweep.yaml"),
            "--master-url",
            f"http://127.0.0.1:{free_port()}",
            "--out",
            str(tmp_path),
        ],
        timeout=60,
    )
    assert result.returncode == 2, result.stdout + result.stderr  # noqa: PLR2004
    assert "cannot reach the master at http://127.0.0.1:" in result.stderr
