"""Running a Why-the-tail scenario against the engine simulator and holding its
attribution check to bounds (tests/process/test_why_the_tail.py and
test_why_server_metrics.py): a run that misses is tried once more; two misses fail, or are
skipped, saying so, where the second came from a simulator the machine held."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT, run_command

SCENARIOS = ROOT / "tests/scenarios"
LONG_PROMPT = 8192  # why_open.yaml's long class
SERVER_METRICS_LINE = "tpot-locust: server metrics:"


def run_scenario(
    scenario: str, out: Path, *args: str, timeout: float = 180
) -> tuple[dict[str, Any], str, float]:
    """``tpot-locust run`` (exit 0 asserted): the summary, stdout and stderr together, and
    the command's wall time in seconds."""
    started = time.monotonic()
    result = run_command(
        [
            sys.executable,
            "-m",
            "tpot_locust",
            "run",
            str(SCENARIOS / scenario),
            "--out",
            str(out),
            *args,
        ],
        timeout=timeout,
    )
    wall_s = time.monotonic() - started
    output = result.stdout + result.stderr
    (out.parent / f"{out.name}.log").write_text(output)  # beside the results, to look into
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    output += (out / "report.txt").read_text()  # every table and check (the terminal: less)
    # the traffic went on through the run (half the duration is plenty)
    last = summary["timeseries"][-1]["t"] if summary["timeseries"] else 0.0
    duration = summary["run"]["duration_s"]
    assert last >= duration / 2, f"traffic stopped at {last} s of {duration} s:\n{output[-3000:]}"
    return summary, output, wall_s


def truth_lines(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / "truth.jsonl").read_text().splitlines() if line]


def simulator_held_ms(out: Path) -> float:
    """The longest the simulator sent a step's tokens after the step ended (ms): how long
    its own process was held from sending, as its step lines record."""
    late = [
        (line["sent_ns"] - line["end_ns"]) / 1e6
        for line in truth_lines(out)
        if line.get("type") == "step" and line.get("sent_ns") and line.get("end_ns")
    ]
    return max(late, default=0.0)


def held_why(out: Path, summary: dict[str, Any], unplanned: tuple[str, ...] = ()) -> str | None:
    """Why the run's true tail is not the engine's, when it is not: the simulator's process
    was held about as long as the tail's gaps, and the true tail has gaps with no engine
    cause, or with a cause the scenario does not plant (``unplanned``: a held process is a
    ``server_pause`` in the truth). None for a run the machine left alone."""
    check = summary["attribution_check"]
    held = simulator_held_ms(out)
    causes = check["true_tail_causes"]
    foreign = causes["none"] + sum(causes.get(cause, 0) for cause in unplanned)
    if held >= 0.5 * check["threshold_ms"] and foreign > 0:
        return (
            f"the simulator's process was held {held:.0f} ms (a busy machine): "
            f"{foreign} of the {check['tail_gaps']} true tail gaps have no engine cause "
            f"or one the scenario does not plant"
        )
    return None


def run_undisturbed(
    tmp_path: Path,
    scenario: str,
    *args: str,
    checks: Callable[[dict[str, Any], str, Path], list[str]],
    unplanned: tuple[str, ...] = (),
) -> tuple[dict[str, Any], str, Path]:
    """Run, and hold the run to ``checks`` (a list of failures). A run that misses is tried
    once more: the bounds are on a few dozen tail gaps, and one run in many misses one (in a
    full suite on 2 cores, 3 of 13 once, each alone 13 of 13 twice; the simulator on its
    schedule throughout). Two misses fail, unless the second came from a held simulator
    (``held_why``, with the causes the scenario does not plant): then it is skipped, saying
    so."""
    missed: list[str] = []
    for attempt in (1, 2):
        out = tmp_path / f"out{attempt}"
        summary, output, _ = run_scenario(scenario, out, *args)
        failures = checks(summary, output, out)
        print(f"attempt {attempt}: {_attribution_lines(output)}")  # shown with pytest -rP
        if not failures:
            return summary, output, out
        missed.append(f"attempt {attempt}: " + "; ".join(failures))
    if why := held_why(out, summary, unplanned):
        pytest.skip(f"both runs missed, the second disturbed: {why}")
    raise AssertionError("\n".join(missed) + "\n" + _attribution_lines(output))


def _attribution_lines(output: str) -> str:
    lines = output.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("Attribution check")), 0)
    return "\n".join(lines[start : start + 4])


def at_least(failures: list[str], name: str, value: float | None, bound: float) -> None:
    if value is None or value < bound:
        failures.append(f"{name} {value} < {bound}")


def held_to(
    failures: list[str], level: dict[str, Any], cause: str, precision: float, recall: float
) -> None:
    """One cause's precision and recall at one level of the attribution check."""
    row, where = level["causes"][cause], f"above P{level['percentile']:g}"
    at_least(failures, f"{cause} precision {where}", row["precision"], precision)
    at_least(failures, f"{cause} recall {where}", row["recall"], recall)
