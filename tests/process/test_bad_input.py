"""Bad command-line input gets one message naming the option, exit 2, never a traceback."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.conftest import run_command
from tpot_locust.wire.http_client import Origin


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
        [sys.executable, "-m", "tpot_locust", "run", "scenarios/quickstart.yaml", *args], timeout=60
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert message in result.stderr
    assert "Traceback" not in result.stderr
    assert "quickstart.yaml:" not in result.stderr  # the file is not to blame


def test_out_naming_an_existing_file(tmp_path: Path) -> None:
    existing = tmp_path / "file"
    existing.write_text("")
    result = run_command(
        [
            sys.executable,
            "-m",
            "tpot_locust",
            "run",
            "scenarios/quickstart.yaml",
            "--out",
            str(existing),
        ],
        timeout=60,
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert f"results folder {existing}" in result.stderr


def test_report_of_a_file_reads_its_folder(tmp_path: Path) -> None:
    (tmp_path / "summary.json").write_text("{}")  # a run's file, its histograms missing
    result = run_command(
        [sys.executable, "-m", "tpot_locust", "report", str(tmp_path / "summary.json")], timeout=60
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert f"{tmp_path / 'histograms.json'}: no saved histograms" in result.stderr


def test_an_openai_base_url_is_accepted() -> None:
    assert Origin.parse("http://127.0.0.1:8000/v1").base_path == ""
    assert Origin.parse("http://127.0.0.1:8000/v1/").base_path == ""
    assert Origin.parse("http://gw/team/v1").base_path == "/team"
    assert Origin.parse("http://gw/team").base_path == "/team"


def _validate(tmp_path: Path, text: str) -> tuple[int, list[str]]:
    scenario = tmp_path / "s.yaml"
    scenario.write_text(text)
    result = run_command([sys.executable, "-m", "tpot_locust", "validate", str(scenario)], 60)
    assert "Traceback" not in result.stderr
    return result.returncode, [
        line.removeprefix(f"{scenario}:") for line in result.stderr.splitlines()
    ]


def test_unclosed_yaml_names_where_it_opened_and_where_it_was_noticed(tmp_path: Path) -> None:
    code, lines = _validate(
        tmp_path,
        "name: x\nclasses:\n  chat:\n    prompt_tokens: 5\n    users: [4\n    output_tokens: 3\n",
    )
    assert code == 2
    assert lines == [
        "6:18: invalid YAML: expected ',' or ']', but got ':' "
        "(a flow sequence that started at line 5, column 12)"
    ]


def test_validate_reports_every_error_with_did_you_mean(tmp_path: Path) -> None:
    code, lines = _validate(
        tmp_path,
        """\
name: bad
durration: 10s
classes:
  chat:
    users: -1
    prompt_tokns: 5
    turns: 0
bursts:
  - {class: nope, at: 1}
slo:
  tpot: {p99: banana, p98: 3ms}
  ttft_p99_ms: banana
  error_rate: 2
  classes: {chatt: {ttft: {p90: 3s}}}
""",
    )
    assert code == 2
    expected = [
        "2:1: durration: unknown key (did you mean duration?)",
        "5:5: classes.chat.users: must be >= 0",
        "6:5: classes.chat.prompt_tokns: unknown key (did you mean prompt_tokens?)",
        "7:5: classes.chat.turns: must be > 0",
        "9:6: bursts.0.class: must name a class: chat",
        "11:10: slo.tpot.p99: must be a time like 15ms or 1.5s, got 'banana'",
        "11:23: slo.tpot.p98: unknown statistic (did you mean p99?)",
        "12:3: slo.ttft.p99: must be a time like 15ms or 1.5s, got 'banana'",
        "13:3: slo.error_rate: must be between 0 and 100%",
        "14:13: slo.classes.chatt: no such class (did you mean chat?)",
    ]
    assert len(lines) == len(expected), lines
    for line, start in zip(lines, expected, strict=True):
        assert line.startswith(start), (line, start)


def test_the_simulator_refuses_a_misspelt_model_as_vllm_does(tmp_path: Path) -> None:
    result = run_command(
        [
            sys.executable,
            "-m",
            "tpot_locust",
            "run",
            "scenarios/quickstart.yaml",
            "--run-time",
            "10s",
            "--set",
            "server.model=tpot-sin",
            "--out",
            str(tmp_path / "run"),
        ],
        timeout=90,
    )
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "The model `tpot-sin` does not exist." in result.stdout + result.stderr
