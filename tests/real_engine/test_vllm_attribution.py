"""Why the tail, on vLLM's CPU build: long prompts that arrive from a trace, never declared as
bursts, are named as the cause of the TPOT tail (``prefill``), and the server's own count of
running requests, sampled from its real ``/metrics``, is the count we had in flight.

The run (``tests/scenarios/real_engine_attribution.yaml``, ~60 s): six decode streams, and
a trace that sends one ~2,200-word prompt every 4 s. It runs on plain Locust with
``tests/helpers/locust_in_flight.py``, which is the scenario locustfile plus a
``token_timings`` listener writing each request's send and end (wall clock): the results
folder keeps no per-request times, and those are what our in-flight count is made of.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.conftest import ROOT, run_command
from tests.engines import envs, servers
from tests.engines import tiny_model as tiny_model_builder
from tests.real_engine.conftest import record_result, serve
from tpot_locust.scenario.loader import load_scenario

pytestmark = pytest.mark.timeout(900)  # the engine's start (1-3 min) counts in the first test

SCENARIO = ROOT / "tests" / "scenarios" / "real_engine_attribution.yaml"
LOCUSTFILE = ROOT / "tests" / "helpers" / "locust_in_flight.py"
TRACE = SCENARIO.parent / "real_engine_long_prompts.jsonl"
STOP_TIMEOUT_S = 30  # the requests in flight at the stop finish and count (5-10 s each)
MIN_TAIL_SAMPLES = 8  # above TPOT P99.9: 29-30 measured here (a thousandth of ~30k)
MIN_PREFILL_SHARE = 0.8
SCRAPE_DEADLINE_S = 1.0  # a sample's own deadline, min(4 intervals, 2 s): a slow one's answer


@dataclass(frozen=True)
class Run:
    summary: dict[str, Any]
    samples: list[dict[str, Any]]  # server_metrics.jsonl's sample lines
    sends: np.ndarray  # each request's send and end, wall-clock seconds
    ends: np.ndarray
    seconds: float


def _prepared() -> str | None:
    """Why the engine cannot be served without building first (minutes), or None."""
    model = envs.cache_dir() / f"tiny-model-v{tiny_model_builder.BUILD_VERSION}"
    missing = [
        name
        for name, ready in (
            ("vLLM's environment", envs.python_of("vllm")),
            ("the tiny model", (model / "tiny-model.json").exists()),
        )
        if not ready
    ]
    if not missing:
        return None
    verb = "is" if len(missing) == 1 else "are"
    return f"{' and '.join(missing)} {verb} not prepared: `python -m tests.engines prepare vllm`"


@pytest.fixture(scope="module")
def vllm(engine_logs: Path) -> Iterator[servers.Engine]:
    reason = _prepared()
    if reason:
        pytest.skip(reason)
    yield from serve("vllm", engine_logs / "attribution")


@pytest.fixture(scope="module")
def run(vllm: servers.Engine, tmp_path_factory: pytest.TempPathFactory) -> Run:
    folder = tmp_path_factory.mktemp("attribution")
    out, in_flight = folder / "out", folder / "in_flight.jsonl"
    scenario = load_scenario(SCENARIO)
    started = time.monotonic()
    result = run_command(
        [
            sys.executable,
            "-m",
            "locust",
            "-f",
            str(LOCUSTFILE),
            "--headless",
            f"--users={scenario.users}",
            f"--spawn-rate={scenario.spawn_rate:g}",
            f"--run-time={scenario.duration_s:g}s",
            "--host",
            vllm.url,
            f"--tpot-out={out}",
            "--only-summary",
            f"--stop-timeout={STOP_TIMEOUT_S}",
        ],
        timeout=300,
        env={"TPOT_SCENARIO": str(SCENARIO), "IN_FLIGHT_FILE": str(in_flight)},
    )
    seconds = time.monotonic() - started
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    print(result.stdout[-6000:])
    lines = [json.loads(line) for line in (out / "server_metrics.jsonl").read_text().splitlines()]
    requests = [json.loads(line) for line in in_flight.read_text().splitlines()]
    return Run(
        summary=json.loads((out / "summary.json").read_text()),
        samples=[line for line in lines if line.get("kind") == "sample"],
        sends=np.array([r["send_s"] for r in requests]),
        ends=np.array([r["end_s"] for r in requests]),
        seconds=seconds,
    )


def test_trace_prompts_are_named_as_the_tpot_tail(run: Run) -> None:
    summary = run.summary
    assert not summary["run"]["bursts"]["windows"]  # nothing was declared a burst
    assert summary["requests"]["failed"] == 0, summary["requests"]
    sent = sum(1 for line in TRACE.read_text().splitlines() if line.startswith("{"))
    assert summary["classes"]["long_prompt"]["requests"]["ok"] == sent
    attribution = summary["attribution"]
    tail = attribution["tpot"]["p99.9"]
    prefill_tokens = attribution["prefill_tokens"]
    # prompts of 2,048 tokens and more make the burst phase: a trace run gets its factor too
    factor = (summary["interference"] or {}).get("interference_factor", {}).get("tpot")
    record_result(
        "vllm attribution, long prompts from a trace",
        tpot_p99_9=tail,
        tpot_samples=summary["metrics"]["tpot"]["count"],
        prefill_tokens=prefill_tokens,
        burst_over_steady=factor,
        run_s=round(run.seconds, 1),
    )
    assert tail["samples"] >= MIN_TAIL_SAMPLES, tail
    assert tail["shares"]["prefill"] >= MIN_PREFILL_SHARE, tail
    # and what was in prefill at those gaps was the trace's long prompts, not the decode
    # streams' own 64-token ones
    assert prefill_tokens["p99.9_median"] >= 1000, prefill_tokens


def _in_flight(run: Run, at: float) -> int:
    return int(((run.sends <= at) & (run.ends > at)).sum())


def _in_flight_range(run: Run, start: float, end: float) -> tuple[int, int]:
    """The fewest and the most requests we had in flight at any moment of [start, end]."""
    counts = [_in_flight(run, start)]
    changes = np.concatenate([run.sends, run.ends])
    counts += [_in_flight(run, at) for at in np.sort(changes[(changes > start) & (changes <= end)])]
    return min(counts), max(counts)


def test_vllm_running_is_our_in_flight_count(run: Run) -> None:
    """vLLM sets its gauge once per engine step, at the step's end, from the requests its
    scheduler holds (admitted after tokenizing, freed before the last bytes reach us): at a
    sample it tells the state of the last step's end, up to one step ago. A step lasts at
    most our longest token gap (every step gives each decode stream a token); the answer
    comes within the interval (a slow sample: within its deadline). So each sample's
    ``running`` must be within one request of what we had in flight at some moment from
    one step before the sample to its answer."""
    metrics = run.summary["run"]["server_metrics"]
    assert metrics["engine"] == "vllm" and metrics["samples"] > 0, metrics
    assert len(run.samples) >= 100, len(run.samples)  # ~60 s at 0.25 s
    step_s = run.summary["metrics"]["itl"]["max"] / 1000 + 0.05
    interval_s = metrics["interval_s"]
    off = []  # samples whose running is not within one of any count of that span
    instant = []  # running minus our count at the very moment of the sample
    for sample in run.samples:
        at, running = sample["t_wall_s"], sample["running"]
        answer_s = SCRAPE_DEADLINE_S if sample.get("slow") else interval_s
        fewest, most = _in_flight_range(run, at - step_s, at + answer_s)
        instant.append(running - _in_flight(run, at))
        if not fewest - 1 <= running <= most + 1:
            off.append({"t_wall_s": at, "running": running, "ours": (fewest, most)})
    instant_off = np.abs(np.array(instant))
    record_result(
        "vllm running against our in-flight count",
        samples=len(run.samples),
        max_abs_instant=float(instant_off.max()),
        exact=int((instant_off == 0).sum()),
        off_by_one=int((instant_off == 1).sum()),
        step_s=round(step_s, 3),
        off=len(off),
    )
    assert not off, off[:10]
    # the series moved with ours: the trace's prompt on top of the decode streams was seen
    running = [sample["running"] for sample in run.samples]
    assert max(running) >= run.summary["run"]["users"] + 1, running
