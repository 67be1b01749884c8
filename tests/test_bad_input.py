"""Bad command-line input gets one message naming the option, exit 2, never a traceback."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.conftest import run_command
from tpot_locust.http_client import Origin


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--users", "-1"], "--users -1: classes.chat.users: must be >= 0"),
        (["--set", "duration=abc"], "--set duration=abc: duration: must be a duration"),
        (["--run-time", "5.5s"], "run time 5.5 s: Locust runs whole seconds"),
        (["--out", "/dev/null/x"], "results folder /dev/null/x: Not a directory"),
        (["--spawn-rate", "0"], "--spawn-rate 0: must be > 0"),
    ],
)
def test_bad_run_options_name_the_option(args: list[str], message: str) -> None:
    result = run_command(
        [sys.executable, "-m", "tpot_locust", "run", "scenarios/quickstart.yaml", *args],
        timeout=60,
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert message in result.stderr
    assert "Traceback" not in result.stderr
    assert "quickstart.yaml:" not in result.stderr  # the file is not to blame


def test_out_naming_an_existing_file(tmp_path: Path) -> None:
    existing = tmp_path / "file"
    existing.write_text("")
    result = run_command(
        [sys.executable, "-m", "tpot_locust", "run", "scenarios/quickstart.yaml",
         "--out", str(existing)],
        timeout=60,
    )  # fmt: skip
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert f"results folder {existing}" in result.stderr


def test_report_of_a_file_reads_its_folder(tmp_path: Path) -> None:
    (tmp_path / "summary.json").write_text("{}")  # a run's file, its histograms missing
    result = run_command(
        [sys.executable, "-m", "tpot_locust", "report", str(tmp_path / "summary.json")],
        timeout=60,
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert f"{tmp_path / 'histograms.json'}: no saved histograms" in result.stderr


def test_an_openai_base_url_is_accepted() -> None:
    assert Origin.parse("http://127.0.0.1:8000/v1").base_path == ""
    assert Origin.parse("http://127.0.0.1:8000/v1/").base_path == ""
    assert Origin.parse("http://gw/team/v1").base_path == "/team"
    assert Origin.parse("http://gw/team").base_path == "/team"
