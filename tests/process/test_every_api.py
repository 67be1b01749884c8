"""Every API we speak, streamed by the embedded simulator and read by a real run: each
token counted once, the conversation continued from the answer's text, and every
figure checked against the simulator's truth."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import ROOT, run_command
from tests.helpers.truth_edges import sent_at_the_edges
from tpot_locust.apis import API_NAMES

# On 2 busy cores the scheduler can hold either process for ~20 ms: the tail is checked
# in tests/process/test_tail_truth.py; here the body of each distribution.
TOLERANCE_MS = {"p50": 0.5, "p90": 1.0}


@pytest.mark.parametrize("api", API_NAMES)
def test_an_api_streams_from_the_simulator_true_to_its_truth(
    tmp_path: Path, python: str, api: str
) -> None:
    out = tmp_path / "out"
    result = run_command(
        [
            python,
            "-m",
            "tpot_locust",
            "run",
            str(ROOT / "tests/scenarios/every_api.yaml"),
            "--set",
            f"server.api={api}",
            "--out",
            str(out),
        ],
        timeout=180,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    requests = summary["requests"]
    assert requests["ok"] >= 8 and requests["failed"] == 0, (requests, summary.get("errors"))
    assert summary["tokens"]["estimated"] is False  # every API reports its output count
    check = summary["truth_check"]["metrics"]
    edge = sent_at_the_edges(out / "truth.jsonl", summary["run"]["window_wall_ns"])
    for metric in ("ttft", "itl", "tpot"):
        rows = check[metric]
        # the truth has when each token left, we when it arrived: a token sent in the last
        # ms of the window can arrive after it (loopback delivery waits for its softirq on
        # a busy machine), one sent just before its start inside it; no other may differ
        missed = rows["count"]["true"] - rows["count"]["measured"]
        assert -edge <= missed <= edge, (metric, rows["count"], edge)
        for key, tolerance in TOLERANCE_MS.items():
            assert abs(rows[key]["error"]) <= tolerance, (metric, key, rows[key])
