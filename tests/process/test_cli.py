"""The README's main command, end to end: a scenario against the embedded simulator."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import run_command

METRICS = ("tpot", "request_tpot", "itl", "ttft", "e2e")


def test_quickstart_run_writes_summary_and_report(tmp_path: Path, python: str) -> None:
    out = tmp_path / "quick"
    result = run_command(
        [
            python,
            "-m",
            "tpot_locust",
            "run",
            "scenarios/quickstart.yaml",
            "--run-time",
            "10s",
            "--out",
            str(out),
        ],
        timeout=180,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    for name in METRICS:
        assert summary["metrics"][name]["count"] > 0, name
        assert summary["metrics"][name]["unit"] == "ms"
    assert summary["requests"]["ok"] > 0 and summary["requests"]["failed"] == 0
    assert summary["tokens"]["output"] > 0 and summary["tokens"]["estimated"] is False
    assert set(summary["classes"]) == {"chat"}
    # every read was stamped by the kernel (Linux, plain HTTP), so each has its delay
    assert summary["metrics"]["read_delay"]["count"] >= summary["requests"]["ok"]
    assert isinstance(summary["client"]["busy"], bool)
    assert "TPOT: gap of every output token after the first" in result.stdout
    assert "tokens/s" in result.stdout and "P99.99" in result.stdout
    # the first screen (issue 46): the seed's table, a line each for the rest, where the
    # full report is; at most 30 lines of 100 columns
    lines = result.stdout.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("=== tpot-locust:"))
    last = next(i for i, line in enumerate(lines) if line.startswith("tpot-locust: report.html"))
    screen = lines[first : last + 1]
    assert len(screen) <= 30 and max(map(len, screen[:-2])) <= 100, screen  # (and 2 paths)
    for label in ("mean", "median", "P90", "P99", "P99.9", "P99.99", "max"):
        assert any(line.split()[:1] == [label] for line in screen), label
    for opening in ("ITL:", "TTFT:", "E2E:", "truth check:", "why the tail:"):
        assert any(line.startswith(opening) for line in screen), opening
    assert (out / "report.html").stat().st_size < 200 * 1024  # docs/report.md's figure
    full = (out / "report.txt").read_text()  # every table, and the checks
    assert "Truth check: measured - true" in full and "E2E: send -> last token event" in full
    # the simulator says whether it kept its own schedule (behind or not: the machine decides)
    schedule = summary["truth_check"]["schedule"]
    assert schedule["events"] > 0 and isinstance(schedule["behind"], bool), schedule
    assert "the simulator's own schedule:" in full
    # the saved histograms re-report the same figures
    again = run_command([python, "-m", "tpot_locust", "report", str(out), "--json"], timeout=60)
    assert again.returncode == 0, again.stderr
    reloaded = json.loads(again.stdout)
    assert reloaded["metrics"] == summary["metrics"]


def test_validate_names_file_line_and_key(tmp_path: Path, python: str) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nclasses:\n  chat:\n    users: 2\n    output_tokens: -5\n")
    result = run_command([python, "-m", "tpot_locust", "validate", str(bad)], timeout=60)
    assert result.returncode == 2
    assert f"{bad}:5:5: classes.chat.output_tokens: must be > 0" in result.stderr
    typo = tmp_path / "typo.yaml"
    typo.write_text("name: x\nclasses:\n  chat:\n    users: 2\n    turn: 3\n")
    result = run_command([python, "-m", "tpot_locust", "run", str(typo)], timeout=60)
    assert result.returncode == 2
    assert f"{typo}:5:5: classes.chat.turn: unknown key" in result.stderr
    assert "Traceback" not in result.stderr


def test_run_with_local_workers(tmp_path: Path, python: str) -> None:
    out = tmp_path / "workers"
    result = run_command(
        [
            python,
            "-m",
            "tpot_locust",
            "run",
            "scenarios/quickstart.yaml",
            "--run-time",
            "4s",
            "--workers",
            "2",
            "--out",
            str(out),
        ],
        timeout=180,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    workers = summary["workers"]
    assert (workers["seen"], workers["reported_in_full"], workers["missing"]) == (2, 2, [])
    assert len(workers["read_delay_p99_ms"]) == 2  # each worker's own
    assert summary["complete"] is True
    assert summary["metrics"]["tpot"]["count"] > 0
    assert "workers: 2 of 2 reported in full" in result.stdout
