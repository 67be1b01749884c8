"""Multi-turn sessions, the completions API and Locust's own stats, via plain ``locust -f``."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from tests.conftest import ROOT, run_command
from tpot_locust.sim.process import start_simulator


def test_multi_turn_history_and_completions_under_plain_locust(tmp_path: Path, python: str) -> None:
    truth_path, out = tmp_path / "truth.jsonl", tmp_path / "out"
    with start_simulator("--gap-ms", "1", "--ttft-ms", "5", truth=truth_path) as sim:
        result = run_command(
            [
                python,
                "-m",
                "locust",
                "-f",
                str(ROOT / "tests/helpers/locust_sessions.py"),
                "--headless",
                "-u",
                "2",
                "-r",
                "2",
                "-t",
                "3s",
                "--host",
                sim.url,
                "--tpot-out",
                str(out),
                "--csv",
                str(tmp_path / "locust"),
            ],
            timeout=120,
        )
    assert result.returncode == 0, result.stderr[-3000:]
    truth = [json.loads(line) for line in truth_path.read_text().splitlines()]
    chat = sorted((e for e in truth if e["api"] == "chat"), key=lambda e: e["arrival_ns"])
    completions = [e for e in truth if e["api"] == "completions"]
    assert len(chat) == 3 and len(completions) == 1
    # each turn re-sends the history: 40 words, then +20 answer +10 new, then +20 +10
    prompts = [e["prompt_tokens"] for e in chat]
    assert prompts[1] - prompts[0] == 20 + 10 and prompts[2] - prompts[1] == 20 + 10, prompts
    assert all(e["completion_tokens"] == 20 for e in chat)
    assert completions[0]["completion_tokens"] == 15
    summary = json.loads((out / "summary.json").read_text())
    assert summary["classes"]["Conversation"]["requests"]["ok"] == 3
    assert summary["classes"]["Completion"]["tokens"]["output"] == 15
    assert summary["classes"]["Conversation"]["tokens"]["prompt_reported"] == sum(prompts)
    # Locust's own statistics see every request, with output tokens as response length
    with open(tmp_path / "locust_stats.csv") as handle:
        rows = {row["Name"]: row for row in csv.DictReader(handle)}
    assert int(rows["/v1/chat/completions"]["Request Count"]) == 3
    assert int(rows["/v1/completions"]["Request Count"]) == 1
    assert float(rows["/v1/completions"]["Average Content Size"]) == 15
    assert "TPOT: gap of every output token after the first" in result.stdout


def test_requests_cut_off_by_the_stop_are_counted_interrupted(tmp_path: Path, python: str) -> None:
    truth_path, out = tmp_path / "truth.jsonl", tmp_path / "out"
    # 20 tokens 300 ms apart: every request is still streaming when the 2 s run stops
    with start_simulator("--gap-ms", "300", "--ttft-ms", "5", truth=truth_path) as sim:
        result = run_command(
            [
                python,
                "-m",
                "locust",
                "-f",
                str(ROOT / "tests/helpers/locust_sessions.py"),
                "--headless",
                "-u",
                "2",
                "-r",
                "2",
                "-t",
                "2s",
                "--host",
                sim.url,
                "--tpot-out",
                str(out),
            ],
            timeout=120,
        )
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["requests"]["interrupted"] == 2, summary["requests"]
    assert summary["requests"]["ok"] == summary["requests"]["failed"] == 0
    # their gaps before the stop count (the window in token time), their E2E does not
    assert summary["window"]["cut"]["stop"] == 2 and summary["metrics"]["e2e"]["count"] == 0
    assert summary["metrics"]["ttft"]["count"] == 2
    # none finished: the screen says what was measured instead of a zero rate (issue 53)
    assert "requests: none finished (2 in flight at the stop)" in result.stdout, result.stdout
    truth = [json.loads(line) for line in truth_path.read_text().splitlines()]
    assert len(truth) == 2 and all(e.get("aborted") for e in truth), truth
    # a gap the server sent as we closed; a request stopped before its first token has none
    sent = sum(max(len(e["send_ns"]) - 1, 0) for e in truth)
    assert sent - 2 <= summary["metrics"]["tpot"]["count"] <= sent >= 8, (summary, sent)
