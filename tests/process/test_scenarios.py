"""The scenario language end to end: open loop, bursts, phases, warm-up, stages, errors."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import ROOT, run_command
from tpot_locust.scenario.loader import ScenarioError, load_scenario

BURST_OPEN = ROOT / "tests/scenarios/burst_open.yaml"


def run_scenario(path: Path, out: Path, *args: str) -> tuple[dict, str]:
    result = run_command(
        [sys.executable, "-m", "tpot_locust", "run", str(path), "--out", str(out), *args],
        timeout=180,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return json.loads((out / "summary.json").read_text()), result.stdout


@pytest.mark.parametrize("workers", [0, 2])
def test_open_loop_bursts_and_phases(tmp_path: Path, workers: int) -> None:
    summary, stdout = run_scenario(BURST_OPEN, tmp_path / "out", "--workers", str(workers))
    classes = summary["classes"]
    # bursts every 2 s in a 6 s run: at 2 s and 4 s, 2 requests each, one window per request
    assert summary["run"]["bursts"]["windows"] == 4
    assert classes["prefill"]["requests"]["ok"] == 4
    # open loop: ~4/s for 6 s (Poisson), intended times recorded, lag and TTFT from intended
    arrivals = classes["arrivals"]
    sent = arrivals["requests"]["ok"] + arrivals["excluded"]["warmup"]
    assert 8 <= sent <= 45, sent
    assert arrivals["metrics"]["schedule_lag"]["count"] == arrivals["requests"]["ok"]
    assert arrivals["metrics"]["ttft_from_intended"]["count"] == arrivals["requests"]["ok"]
    assert arrivals["metrics"]["schedule_lag"]["p50"] < 50  # ms: the senders kept up
    assert classes["decode"]["metrics"]["schedule_lag"]["count"] == 0  # closed loop
    # every gap is tagged exactly once, as steady or burst
    decode = classes["decode"]
    phases = decode["interference"]["phases"]
    tagged = phases["steady"]["tpot"]["count"] + phases["burst"]["tpot"]["count"]
    assert tagged == decode["metrics"]["tpot"]["count"]
    assert phases["burst"]["tpot"]["count"] > 0
    assert decode["interference"]["interference_factor"]["tpot"]["p50"] is not None
    assert {g["phase"] for g in decode["worst_gaps"]} <= {"steady", "burst"}
    # warm-up requests are left out of the histograms, and said so
    assert summary["excluded"]["warmup"] > 0
    full = (tmp_path / "out" / "report.txt").read_text()  # the full report
    assert "Interference: per-token gaps during prefill bursts vs steady" in full
    assert "warm-up" in full
    # the progress line, at least every few seconds
    assert len(re.findall(r"\]\s+users \d", stdout)) >= 2


def test_stages_change_users_and_rates(tmp_path: Path) -> None:
    summary, _ = run_scenario(ROOT / "tests/scenarios/stages.yaml", tmp_path / "out")
    users = [point["users"] for point in summary["timeseries"]]
    assert max(users) >= 5 and min(users[:2]) <= 3, users
    # constant 2/s for the first 2 s only (the second stage sets the rate to 0)
    assert 2 <= summary["classes"]["steady_rate"]["requests"]["ok"] <= 6


ERROR_CASES = [
    ("classes:\n  a:\n    users: 2\n    rate: 3\n", "4:5: classes.a.rate: a class is closed loop"),
    ("classes:\n  a:\n    rate: 1\n    arrival: lumpy\n", "4:5: classes.a.arrival: must be one of"),
    (
        "classes:\n  a: {users: 1}\nbursts:\n  - {class: b, every: 1s}\n",
        "4:6: bursts.0.class: must name a class",
    ),
    (
        "duration: 5s\nclasses:\n  a: {users: 1}\nstages:\n  - {duration: 2s}\n",
        "1:1: duration: the stages set the duration",
    ),
    (
        "classes:\n  a: {users: 1, output_tokens: {dist: normal, mean: -1, stddev: 1}}\n",
        "2:47: classes.a.output_tokens.mean: must be > 0",
    ),
    (
        "classes:\n  a: {users: 1, prompt_tokens: {dist: empirical, file: nope.jsonl}}\n",
        "2:50: classes.a.prompt_tokens.file: cannot read",
    ),
    ("duration: 2s\nwarmup: 3s\nclasses:\n  a: {users: 1}\n", "2:1: warmup: warmup + cooldown"),
    ("classes:\n  a:\n    users: many\n", "3:5: classes.a.users: must be an integer"),
    ("classes:\n  a:\n    rate: -2\n", "3:5: classes.a.rate: must be >= 0"),
    (
        "classes:\n  a:\n    users: 1\n  b:\n    users: 1\n    turns: [1]\n",
        "6:5: classes.b.turns: must be an integer",
    ),
    ("server:\n  hots: x\nclasses:\n  a: {users: 1}\n", "2:3: server.hots: unknown key"),
    ("classes: [a, b]\n", "1:1: classes: needs at least one traffic class"),
    ("classes:\n  a: {users: 1\n", "invalid YAML"),
]


@pytest.mark.parametrize(("text", "message"), ERROR_CASES)
def test_errors_name_file_line_column_and_key(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(text)
    with pytest.raises(ScenarioError) as raised:
        load_scenario(path)
    assert str(raised.value).startswith(str(path))
    assert message in str(raised.value)


def test_validate_command_reports_every_broken_file(tmp_path: Path) -> None:
    paths = []
    for number, (text, _) in enumerate(ERROR_CASES):
        path = tmp_path / f"broken{number}.yaml"
        path.write_text(text)
        paths.append(str(path))
    result = run_command([sys.executable, "-m", "tpot_locust", "validate", *paths], timeout=60)
    assert result.returncode == 2
    errors = result.stderr.strip().splitlines()
    assert len(errors) == len(ERROR_CASES)
    for line, path, (_, message) in zip(errors, paths, ERROR_CASES, strict=True):
        assert line.startswith(f"{path}:") and message in line, line
    assert "Traceback" not in result.stderr


def test_empirical_lengths_and_set_overrides(tmp_path: Path) -> None:
    (tmp_path / "lengths.jsonl").write_text('{"n": 10}\n{"n": 20}\n')
    (tmp_path / "s.yaml").write_text(
        "classes:\n  a:\n    users: 1\n"
        "    prompt_tokens: {dist: empirical, file: lengths.jsonl, field: n}\n"
    )
    scenario = load_scenario(tmp_path / "s.yaml", ["classes.a.users=7", "duration=2m"])
    assert scenario.users == 7 and scenario.duration_s == 120
    (tmp_path / "lengths.jsonl").write_text('{"n": 10}\n{"n": 20}\n{"m": 1}\n')
    with pytest.raises(ScenarioError, match="row 3: no positive n"):
        load_scenario(tmp_path / "s.yaml")


def test_shipped_scenarios_validate() -> None:
    for path in sorted((ROOT / "scenarios").glob("*.yaml")):
        scenario = load_scenario(path)
        assert scenario.classes, path


def _arrivals(truth_path: Path) -> np.ndarray:
    entries = [json.loads(line) for line in truth_path.read_text().splitlines()]
    return np.sort(np.array([e["arrival_ns"] for e in entries if "request_id" in e])) / 1e9


@pytest.mark.parametrize("slow", [False, True])
def test_poisson_open_loop_rate_and_coordinated_omission(tmp_path: Path, slow: bool) -> None:
    path = ROOT / "tests/scenarios/open_loop.yaml"
    extra = ["--set", "simulator.ttft_ms=400"] if slow else []
    summary, _ = run_scenario(path, tmp_path / "out", *extra)
    arrivals = _arrivals(tmp_path / "out" / "truth.jsonl")
    rate = (arrivals.size - 1) / (arrivals[-1] - arrivals[0])
    assert 45 <= rate <= 55, rate  # 50/s within 10 %
    gaps = np.diff(arrivals)
    assert 0.85 <= gaps.std() / gaps.mean() <= 1.15  # Poisson: coefficient of variation ~1
    poisson = summary["classes"]["poisson"]["metrics"]
    assert poisson["schedule_lag"]["p50"] < 5  # ms: sends kept their schedule
    if slow:
        # the server is slow, not the sender: the send rate held, and TTFT from the intended
        # time shows the full wait (it can only be >= TTFT from send)
        assert poisson["ttft_from_intended"]["p50"] >= poisson["ttft"]["p50"] >= 400
    assert summary["dropped_arrivals"] == 0


def test_prefill_bursts_attributed_on_a_known_cause(tmp_path: Path) -> None:
    """The engine simulator with chunked prefill off stalls every decode stream for the
    whole prefill; on, the prefill is split into budgeted steps. Attribution must show it."""
    path = ROOT / "tests/scenarios/prefill_burst_engine.yaml"
    factors = {}
    for chunked in ("false", "true"):
        # on: 1024-token chunks (vLLM's budget is often 512-2048 when latency matters)
        engine = f"{{chunked_prefill: {chunked}, stall_prob: 0, max_num_batched_tokens: 1024}}"
        summary, _ = run_scenario(path, tmp_path / chunked, "--set", f"simulator.engine={engine}")
        decode = summary["classes"]["decode"]["interference"]
        burst, steady = decode["phases"]["burst"]["tpot"], decode["phases"]["steady"]["tpot"]
        assert burst["count"] > 0 and steady["count"] > 0
        factors[chunked] = burst["p99"] / steady["p99"]
    assert factors["false"] > 3, factors
    assert factors["true"] < factors["false"], factors


def test_a_refused_burst_request_opens_no_prefill_window(tmp_path: Path) -> None:
    """Burst prompts longer than the engine's context are refused (HTTP 400): no prefill
    ran, so no window is counted and no gap is tagged burst; they are listed apart."""
    path = ROOT / "tests/scenarios/prefill_burst_engine.yaml"
    out = tmp_path / "out"
    result = run_command(
        [
            sys.executable,
            "-m",
            "tpot_locust",
            "run",
            str(path),
            "--out",
            str(out),
            "--set",
            "simulator.engine={stall_prob: 0, max_model_len: 4096}",
            "--set",
            "duration=5s",
        ],
        timeout=180,
    )
    assert result.returncode == 1, result.stdout[-3000:]  # Locust's: requests failed
    summary = json.loads((out / "summary.json").read_text())
    bursts = summary["run"]["bursts"]
    refused = summary["classes"]["long_prompt"]["requests"]
    assert refused["ok"] == 0 and refused["failed"] >= 3, refused
    assert bursts["windows"] == 0 and bursts["prefill_s"] == []
    assert bursts["failed"] == refused["failed"]
    assert summary["classes"]["decode"]["interference"] is None  # no gap fell in a window


def test_shipped_burst_scenarios_count_their_first_burst() -> None:
    """A warm-up as long as the time of the first burst would leave its victims out."""
    for path in sorted((ROOT / "scenarios").glob("*.yaml")):
        scenario = load_scenario(path)
        for burst in scenario.bursts:
            assert scenario.warmup_s < burst.times_s[0], (path.name, scenario.warmup_s)
