"""With a local tokenizer named in the scenario, prompts are built to exactly the requested
token count, and the embedded simulator, counting with the same tokenizer, agrees on every
request: first turns, later turns carrying the answers, and a shared prefix."""

from __future__ import annotations

import itertools
import json
import random
import threading
import time
import urllib.request
from pathlib import Path

from tests.conftest import run_scenario, truth_requests
from tests.helpers.small_tokenizer import build_tokenizer
from tpot_locust.scenario.prompts import WORDS
from tpot_locust.sim.process import start_simulator

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
    summary, result = run_scenario(scenario, out)
    prompt = summary["tokens"]["prompt"]
    assert prompt["requests"] == summary["requests"]["ok"] > 20
    assert prompt["max_difference"] == 0 and prompt["requested"] == prompt["reported"], prompt
    full = (out / "report.txt").read_text()  # the full report (the terminal shows its first screen)
    assert "prompt tokens: requested" in full and "at most 0 apart" in full
    # the simulator counted them itself: its truth log holds its own count per request
    counted = sum(entry.get("prompt_tokens", 0) for entry in truth_requests(out))
    assert counted >= prompt["reported"]


def test_the_simulator_counts_long_prompts_beside_its_streams(tmp_path: Path) -> None:
    """Counting a long prompt with a tokenizer takes tens of ms; on the simulator's loop it
    held every running stream's next token (interference no engine makes: its tokenizer
    runs beside the decode loop), so the simulator counts large bodies on a thread."""
    tokenizer = build_tokenizer(tmp_path / "tokenizer")
    truth = tmp_path / "truth.jsonl"
    long_prompt = " ".join(random.Random(0).choices(WORDS, k=8000))  # ~13k tokens, ~50 ms
    args = ("--tokenizer", str(tokenizer), "--gap-ms", "2", "--ttft-ms", "5")
    with start_simulator(*args, truth=truth) as sim:
        steady = threading.Thread(target=post_chat, args=(sim.url, "steady", "hi there", 400))
        steady.start()
        time.sleep(0.1)
        for number in range(6):
            post_chat(sim.url, f"long-{number}", long_prompt, 1)
        steady.join(timeout=30)
    lines = {line["request_id"]: line for line in truth_requests(tmp_path)}
    assert all(lines[f"long-{n}"]["prompt_tokens"] > 10_000 for n in range(6))
    sends = lines["steady"]["send_ns"]
    worst_gap_ms = max(b - a for a, b in itertools.pairwise(sends)) / 1e6
    assert lines["steady"]["completion_tokens"] == 400 and worst_gap_ms < 20, worst_gap_ms  # noqa: PLR2004


def post_chat(url: str, request_id: str, text: str, max_tokens: int) -> None:
    body = {
        "model": "tpot-sim",
        "messages": [{"role": "user", "content": text}],
        "max_tokens": max_tokens,
        "min_tokens": max_tokens,
        "stream": True,
    }
    request = urllib.request.Request(
        url + "/v1/chat/completions",
        json.dumps(body).encode(),
        {"content-type": "application/json", "x-request-id": request_id},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        response.read()
