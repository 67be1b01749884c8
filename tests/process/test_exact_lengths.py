"""With a local tokenizer named in the scenario, prompts are built to exactly the requested
token count, and the embedded simulator, counting with the same tokenizer, agrees on every
request: first turns, later turns carrying the answers, and a shared prefix."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tests.conftest import run_command, truth_requests
from tests.helpers.small_tokenizer import build_tokenizer

SCENARIO = """\
name: exact-lengths
duration: 6s
seed: 2
server:
  tokenizer: {tokenizer}
classes:
  chat:
    users: 4
    prompt_tokens: {{dist: uniform, min: 20, max: 400}}
    followup_tokens: 30
    output_tokens: 24
    turns: 2
    shared_prefix_tokens: 40
    shared_prefix_ratio: 0.5
simulator:
  gap_ms: 1
  ttft_ms: 5
"""


def test_every_request_carries_exactly_the_requested_prompt_tokens(tmp_path: Path) -> None:
    tokenizer = build_tokenizer(tmp_path / "tokenizer")
    scenario = tmp_path / "exact.yaml"
    scenario.write_text(SCENARIO.format(tokenizer=tokenizer))
    out = tmp_path / "out"
    result = run_command(
        [sys.executable, "-m", "tpot_locust", "run", str(scenario), "--out", str(out)],
        timeout=120,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    prompt = summary["tokens"]["prompt"]
    assert prompt["requests"] == summary["requests"]["ok"] > 20
    assert prompt["max_difference"] == 0 and prompt["requested"] == prompt["reported"], prompt
    assert "prompt tokens: requested" in result.stdout and "at most 0 apart" in result.stdout
    # the simulator counted them itself: its truth log holds its own count per request
    counted = sum(entry.get("prompt_tokens", 0) for entry in truth_requests(out))
    assert counted >= prompt["reported"]
