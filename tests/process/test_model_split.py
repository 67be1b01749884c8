"""Several LoRA adapters behind one endpoint, end to end (issue 31, item 3): a class split
3:1 over two adapters arrives 3:1 at the simulator, is reported per model with the same
counts the simulator served, and with one LoRA slot each switch of adapter costs its load,
which shows in every adapter's TTFT."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from tests.conftest import run_scenario, truth_requests

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
"""


def test_a_three_to_one_split_arrives_three_to_one_and_is_reported_per_model(
    tmp_path: Path,
) -> None:
    scenario = tmp_path / "split.yaml"
    scenario.write_text(SCENARIO)
    out = tmp_path / "out"
    summary, result = run_scenario(scenario, out)
    requests = truth_requests(out)
    arrived = Counter(request["model"] for request in requests)
    assert arrived.keys() == {"lora-a", "lora-b"} and sum(arrived.values()) >= 40, arrived
    # dealt by weight: three in four to lora-a, within the picks the stop cut off (8 users)
    assert abs(arrived["lora-a"] - 3 * arrived["lora-b"]) <= 3 * 8, arrived
    served = Counter(r["model"] for r in requests if not r["aborted"])
    models = summary["models"]
    assert {name: part["requests"]["ok"] for name, part in models.items()} == served
    assert summary["classes"]["chat"]["requests"]["ok"] == summary["requests"]["ok"]
    assert "model lora-b" in result.stdout
    # one slot: each adapter's first request waited for its load, at least
    for name in ("lora-a", "lora-b"):
        assert models[name]["metrics"]["ttft"]["max"] >= LOAD_MS, (name, models[name])
    lines = [json.loads(line) for line in (out / "truth.jsonl").read_text().splitlines()]
    loads = [line for line in lines if line.get("type") == "step" and line["adapter_loads"]]
    assert len(loads) >= 2  # each adapter's first load, and then each switch
    assert all(step["end_ns"] - step["start_ns"] >= LOAD_MS * 1_000_000 for step in loads)
