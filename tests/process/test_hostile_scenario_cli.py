"""Hostile scenario files given to the real command: a clear error and exit 2 within
seconds, never a traceback or a process growing until it is killed (issue 25)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.conftest import run_command
from tests.unit.test_hostile_scenario import ALIAS_BOMB

HOSTILE = {
    "alias-bomb": (ALIAS_BOMB, "values (aliases expanded)"),
    "recursive-alias": ("classes:\n  chat: {users: 1}\nx: &a [*a]\n", "recursive"),
    "deep": ("x: " + "[" * 5000 + "]" * 5000 + "\n", "nested deeper than 64 levels"),
    "nan-think-time": ("classes:\n  chat: {users: 1, think_time: .nan}\n", "finite"),
    "nul-name": ('name: "a\\0b"\nclasses:\n  chat: {users: 1}\n', "name: must be printable"),
    "dev-zero-trace": ("classes:\n  chat: {trace: /dev/zero}\n", "not a regular file"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_validate_refuses_hostile_scenarios_quickly(tmp_path: Path, case: str) -> None:
    text, message = HOSTILE[case]
    path = tmp_path / f"{case}.yaml"
    path.write_text(text)
    result = run_command([sys.executable, "-m", "tpot_locust", "validate", str(path)], timeout=20)
    assert result.returncode == 2, result.stdout + result.stderr
    named = "/dev/zero:1:1" if case == "dev-zero-trace" else f"{path}:"  # the trace's errors
    assert message in result.stderr and named in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


def test_run_refuses_an_alias_bomb_in_a_set_value(tmp_path: Path) -> None:
    bomb = (
        "{a: &a [x,x,x,x,x,x,x,x,x], "
        + ", ".join(
            f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 9)}]"
            for i in range(8)
        )
        + "}"
    )
    result = run_command(
        [
            sys.executable,
            "-m",
            "tpot_locust",
            "run",
            "scenarios/quickstart.yaml",
            "--set",
            f"classes.chat.extra_body={bomb}",
            "--out",
            str(tmp_path / "out"),
        ],
        timeout=20,
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert "--set classes.chat.extra_body" in result.stderr and "aliases expanded" in result.stderr
    assert "Traceback" not in result.stderr


def test_escape_sequences_in_a_scenario_reach_no_terminal(tmp_path: Path) -> None:
    scenario = tmp_path / "escapes.yaml"
    scenario.write_text('name: ok\n"\\e[2J\\e]0;PWNED\\a": 1\nclasses:\n  chat: {users: 1}\n')
    for command in (["validate", str(scenario)], ["run", str(scenario), "--set", "\x1b[2Jx=1"]):
        result = run_command([sys.executable, "-m", "tpot_locust", *command], timeout=60)
        assert result.returncode == 2, result.stderr  # noqa: PLR2004
        assert "\x1b" not in result.stderr and "\x07" not in result.stderr, result.stderr
        assert "unknown key" in result.stderr


def test_plain_locust_names_an_invalid_scenario_without_a_traceback(tmp_path: Path) -> None:
    scenario = tmp_path / "bomb.yaml"
    scenario.write_text(ALIAS_BOMB)
    result = run_command(
        [
            sys.executable,
            "-m",
            "locust",
            "-f",
            "locustfiles/scenario.py",
            "--headless",
            "-u",
            "1",
            "-t",
            "2s",
            "--host",
            "http://127.0.0.1:9",
        ],
        timeout=60,
        env={"TPOT_SCENARIO": str(scenario)},
    )
    assert result.returncode == 2, result.stderr  # noqa: PLR2004
    assert "Traceback" not in result.stderr and "aliases expanded" in result.stderr
