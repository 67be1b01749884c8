"""Trace files: every line checked with its file:line, conversations kept whole."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import ROOT
from tpot_locust.scenario.loader import load_scenario
from tpot_locust.scenario.trace import load_trace, sessions, share_of
from tpot_locust.scenario.yaml_source import ScenarioError


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "trace.jsonl"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('{"t": 1, "output_tokens": 8}', "needs exactly one of input_tokens"),
        ('{"t": -1, "input_tokens": 4, "output_tokens": 8}', "t: must be a number >= 0"),
        ('{"t": 1, "input_tokens": 4, "output_tokens": 0}', "output_tokens: must be an integer"),
        ('{"t": 1, "input_tokens": 4, "output_tokens": 8, "x": 1}', "unknown key 'x'"),
        ("[1, 2", "not a JSON object"),
    ],
)
def test_a_bad_line_is_named_by_file_and_line(tmp_path: Path, line: str, message: str) -> None:
    path = write(
        tmp_path, f'# a comment\n{{"t": 0, "input_tokens": 4, "output_tokens": 8}}\n\n{line}\n'
    )
    with pytest.raises(ScenarioError) as error:
        load_trace(path)
    assert str(error.value).startswith(f"{path}:4:1: ") and message in str(error.value)


def test_conversations_stay_whole_and_each_process_sends_its_share_once(tmp_path: Path) -> None:
    lines = [
        f'{{"t": {i * 0.1:.1f}, "input_tokens": {i + 1}, "output_tokens": 4}}' for i in range(9)
    ]
    lines += [
        '{"t": 0.05, "prompt": "a", "output_tokens": 4, "session": "s"}',
        '{"t": 0.95, "prompt": "b", "output_tokens": 4, "session": "s"}',
    ]
    conversations = sessions(load_trace(write(tmp_path, "\n".join(lines))))
    assert [turn.prompt for turn in conversations[1]] == ["a", "b"]  # one conversation, in order
    shares = [share_of(conversations, index, 3) for index in range(3)]
    sent = [turn.line for share in shares for turns in share for turn in turns]
    assert sorted(sent) == list(range(1, 12))  # none lost, none twice


def test_a_scenario_names_the_trace_file_and_line_of_its_error(tmp_path: Path) -> None:
    write(tmp_path, '{"t": 0, "input_tokens": 4, "output_tokens": 8}\n{"t": "soon"}\n')
    scenario = tmp_path / "s.yaml"
    scenario.write_text("classes:\n  replay:\n    trace: trace.jsonl\n    speedup: 2\n")
    with pytest.raises(ScenarioError, match=r"trace\.jsonl:2:1: t: must be a number"):
        load_scenario(scenario)


def test_the_shipped_trace_scenario_loads() -> None:
    (replay,) = load_scenario(ROOT / "scenarios/trace-replay.yaml").classes
    assert replay.open_loop and len(replay.trace_requests) == 13
