"""Several LoRA adapters behind one endpoint, end to end (issue 31, item 3): a class split
3:1 over two adapters arrives 3:1 at the simulator, is reported per model with the same
counts the simulator served, and with one LoRA slot each switch of adapter costs its load,
which shows in every adapter's TTFT; each model is gated on its own figures (``slo.models``)."""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

from tests.conftest import run_command, truth_requests

LOAD_MS = 30

SCENARIO = f"""\
name: lora-split
duration: 8s
seed: 5
server: {{include_usage: true, ignore_eos: true, min_tokens: true}}
classes:
  chat:
    users: 8
    prompt_tokens: 32
    output_tokens: 8
    model: {{lora-a: 3, lora-b: 1}}
simulator:
  profile: h200-llama3-8b
  engine: {{max_loras: 1, adapter_load_ms: {LOAD_MS}, stall_prob: 0}}
slo:  # each model gated on its own figures: lora-b's first request waits for its load
  models: {{lora-a: {{error_rate: 1%}}, lora-b: {{ttft: {{max: {LOAD_MS - 10}ms}}}}}}
"""


def test_a_three_to_one_split_arrives_three_to_one_and_is_reported_per_model(
    tmp_path: Path,
) -> None:
    scenario = tmp_path / "split.yaml"
    scenario.write_text(SCENARIO)
    out = tmp_path / "out"
    result = run_command(
        [sys.executable, "-m", "tpot_locust", "run", str(scenario), "--out", str(out)], timeout=120
    )
    assert result.returncode == 1, result.stdout[-3000:] + result.stderr[-3000:]  # lora-b's SLO
    summary = json.loads((out / "summary.json").read_text())
    requests = truth_requests(out)
    arrived = Counter(request["model"] for request in requests)
    assert arrived.keys() == {"lora-a", "lora-b"} and sum(arrived.values()) >= 40, arrived
    # dealt by weight: three in four to lora-a, within the picks the stop cut off (8 users)
    assert abs(arrived["lora-a"] - 3 * arrived["lora-b"]) <= 3 * 8, arrived
    served = Counter(r["model"] for r in requests if not r["aborted"])
    models = summary["models"]
    assert {name: part["requests"]["ok"] for name, part in models.items()} == served
    assert summary["classes"]["chat"]["requests"]["ok"] == summary["requests"]["ok"]
    assert "model lora-b" in (out / "report.txt").read_text()  # the full report's sections
    # one slot: each adapter's first request waited for its load, at least
    for name in ("lora-a", "lora-b"):
        assert models[name]["metrics"]["ttft"]["max"] >= LOAD_MS, (name, models[name])
    lines = [json.loads(line) for line in (out / "truth.jsonl").read_text().splitlines()]
    loads = [line for line in lines if line.get("type") == "step" and line["adapter_loads"]]
    assert len(loads) >= 2  # each adapter's first load, and then each switch
    assert all(step["end_ns"] - step["start_ns"] >= LOAD_MS * 1_000_000 for step in loads)
    checks = {check["model"]: check for check in summary["slo"]["checks"]}
    assert checks["lora-a"]["verdict"] == "pass" and checks["lora-a"]["metric"] == "error_rate"
    assert checks["lora-b"]["verdict"] == "fail", checks["lora-b"]
    assert checks["lora-b"]["measured"] == models["lora-b"]["metrics"]["ttft"]["max"]
    assert f"model lora-b: ttft max <= {LOAD_MS - 10} ms" in result.stdout
