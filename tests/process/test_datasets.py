"""A ShareGPT-style file of 3 conversations, replayed by one user in file order: every user
turn is sent in order, with the server's answers before it and the recorded answer's
length as its max_tokens (the simulator's truth log shows each request's lengths)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tests.conftest import run_command, truth_requests

CONVERSATIONS = [  # user turns (words), recorded answers (words)
    [("alpha beta gamma", "a b c d e"), ("delta epsilon", "f g h i")],
    [("one two three four", "x y z"), ("five", "p q"), ("six seven eight nine ten eleven", "r s")],
    [("lorem ipsum dolor sit amet consectetur adipiscing", "u v w x y z")],
]
# what each request carries, in order: (prompt words, completion tokens), the answers being
# the simulator's own words, one per token
EXPECTED = [(3, 5), (3 + 5 + 2, 4), (4, 3), (4 + 3 + 1, 2), (8 + 2 + 6, 2), (7, 6)]

SCENARIO = """\
name: sharegpt
duration: 4s
server: {{ignore_eos: true}}
classes:
  chat:
    users: 1
    dataset: {dataset}
    dataset_order: sequential
simulator: {{gap_ms: 1, ttft_ms: 2}}
"""


def human(text: str) -> dict[str, str]:
    return {"from": "human", "value": text}


def test_a_sharegpt_file_replays_every_user_turn_in_order(tmp_path: Path) -> None:
    items = [
        {
            "conversations": [
                message
                for user, answer in turns
                for message in (human(user), {"from": "gpt", "value": answer})
            ]
        }
        for turns in CONVERSATIONS
    ]
    dataset = tmp_path / "chats.json"
    dataset.write_text(json.dumps(items, indent=2))
    scenario = tmp_path / "sharegpt.yaml"
    scenario.write_text(SCENARIO.format(dataset=dataset))
    out = tmp_path / "out"
    result = run_command(
        [sys.executable, "-m", "tpot_locust", "run", str(scenario), "--out", str(out)], timeout=120
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    sent = truth_requests(out)
    seen = [(e["prompt_tokens"], e["completion_tokens"]) for e in sent[:-1]]  # the last: cut
    assert len(seen) >= 3 * len(EXPECTED)  # the file went round several times
    assert seen == [EXPECTED[i % len(EXPECTED)] for i in range(len(seen))]


def test_a_sequential_dataset_is_dealt_out_among_workers(tmp_path: Path) -> None:
    """Two workers, one user each: worker 0 sends entries 0, 2, 4, 0, ... and worker 1
    entries 1, 3, 5, 1, ...: the file in order between them, no entry twice a round."""
    dataset = tmp_path / "prompts.jsonl"
    words = [" ".join(["w"] * (n + 1)) for n in range(6)]  # entry n has n + 1 words
    dataset.write_text("".join(json.dumps({"text": t, "output_tokens": 2}) + "\n" for t in words))
    scenario = tmp_path / "dealt.yaml"
    scenario.write_text(SCENARIO.format(dataset=dataset).replace("users: 1", "users: 2"))
    out = tmp_path / "out"
    result = run_command(
        [
            sys.executable,
            "-m",
            "tpot_locust",
            "run",
            str(scenario),
            "--out",
            str(out),
            "--workers",
            "2",
        ],
        timeout=120,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    by_process: dict[str, list[int]] = {}
    for entry in truth_requests(out):
        by_process.setdefault(entry["request_id"][:4], []).append(entry["prompt_tokens"] - 1)
    assert len(by_process) == 2
    starts = sorted(sequence[:3] for sequence in by_process.values())
    assert starts == [[0, 2, 4], [1, 3, 5]], by_process
