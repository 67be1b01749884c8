"""`transformers serve --continuous-batching` as the server under test: it refuses
``ignore_eos``/``min_tokens`` (HTTP 422, named in the first failure with the fix), counts
match its usage once they are left out, and prefill bursts stretch its decode gaps."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import run_command
from tests.engines import servers
from tests.real_engine.conftest import burst_over_steady, record_result, run_scenario, serve

pytestmark = pytest.mark.timeout(900)  # an engine's start (1-3 min) counts in its first test

STRICT = ["--set", "server.ignore_eos=false", "--set", "server.min_tokens=false"]


@pytest.fixture(scope="module")
def transformers(engine_logs: Path) -> Iterator[servers.Engine]:
    yield from serve("transformers", engine_logs)


def test_a_refused_field_is_named_with_its_fix(
    transformers: servers.Engine, tmp_path: Path
) -> None:
    result = run_command(
        [
            sys.executable,
            "-m",
            "tpot_locust",
            "run",
            "scenarios/quickstart.yaml",
            "--host",
            transformers.url,
            "--out",
            str(tmp_path),
        ],
        timeout=120,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 1, output[-3000:]
    assert "422" in output and "server.ignore_eos: false" in output, output[-3000:]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["requests"]["failed"] < 200  # backed off from, never flooded


def test_quickstart_counts_what_the_server_reported(
    transformers: servers.Engine, tmp_path: Path
) -> None:
    summary = run_scenario(
        "scenarios/quickstart.yaml", transformers.url, tmp_path, *STRICT, "--stop-timeout", "60s"
    )
    tokens, requests = summary["tokens"], summary["requests"]
    assert requests["ok"] > 10 and requests["failed"] == 0, requests
    assert not tokens["estimated"]  # usage came in every stream's finish chunk
    assert tokens["output"] == requests["ok"] * 128  # the server's usage, request by request
    # one token per event: every finished request's gaps, inside the window or after it
    # (those the graceful stop finished); a stream the stop still cut adds its own
    measured = summary["metrics"]["tpot"]["count"] + summary["window"]["gaps_after"]
    if requests["interrupted"] == 0:
        assert measured == tokens["output"] - requests["ok"]
    assert measured >= tokens["output"] - requests["ok"]
    record_result("transformers quickstart", requests=requests["ok"], prompt=tokens["prompt"])


def test_prefill_bursts_stretch_the_decode_gaps(
    transformers: servers.Engine, tmp_path: Path
) -> None:
    summary = run_scenario("scenarios/real-engine-cpu.yaml", transformers.url, tmp_path)
    assert summary["run"]["bursts"]["windows"] >= 6 and not summary["run"]["bursts"]["failed"]
    ratio = burst_over_steady(summary)
    record_result("transformers prefill bursts", tpot_p99_burst_over_steady=ratio)
    assert ratio >= 5, summary["interference"]
