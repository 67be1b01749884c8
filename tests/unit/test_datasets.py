"""Dataset files (JSONL, CSV, ShareGPT JSON): their conversations, and file:line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tpot_locust.scenario.datasets import DatasetTurn, load_dataset
from tpot_locust.scenario.yaml_source import ScenarioError

SHAREGPT = [
    {
        "id": "a",
        "conversations": [
            {"from": "system", "value": "be brief"},
            {"from": "human", "value": "alpha beta gamma"},
            {"from": "gpt", "value": "one two"},
            {"from": "human", "value": "delta"},
            {"from": "gpt", "value": "three four five"},
        ],
    },
    {"id": "b", "messages": [{"role": "user", "content": "hello"}]},
]


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_sharegpt_conversations_keep_their_user_turns_and_answers(tmp_path: Path) -> None:
    path = write(tmp_path / "chats.json", json.dumps(SHAREGPT, indent=1))
    first, second = load_dataset(path)
    assert first == (
        DatasetTurn("alpha beta gamma", answer="one two"),
        DatasetTurn("delta", answer="three four five"),
    )
    assert second == (DatasetTurn("hello"),)


def test_jsonl_and_csv_give_one_turn_each_with_an_optional_length(tmp_path: Path) -> None:
    jsonl = write(
        tmp_path / "p.jsonl", '{"text": "hi there"}\n\n{"prompt": "yo", "output_tokens": 7}\n'
    )
    assert load_dataset(jsonl) == [
        (DatasetTurn("hi there"),),
        (DatasetTurn("yo", output_tokens=7),),
    ]
    table = write(tmp_path / "p.csv", 'text,output_tokens\n"a, b",3\nc,\n')
    assert load_dataset(table) == [(DatasetTurn("a, b", output_tokens=3),), (DatasetTurn("c"),)]


@pytest.mark.parametrize(
    ("name", "text", "where"),
    [
        ("bad.jsonl", '{"text": "ok"}\n{"text": \n', "bad.jsonl:2:1: not JSON"),
        ("bad.jsonl", '{"text": "ok"}\n{"txt": "no"}\n', "bad.jsonl:2:1: needs a non-empty text"),
        ("bad.jsonl", '{"text": "a", "output_tokens": -2}\n', "bad.jsonl:1:1: output_tokens"),
        ("bad.csv", 'text\nok\n""\n', "bad.csv:3:1: needs a non-empty text"),
        ("bad.csv", "prompt_text\nx\n", "bad.csv:1:1: the header needs a text or prompt column"),
        (
            "bad.json",
            '[\n {"conversations": []},\n {"turns": []}\n]',
            "bad.json:3:1: a conversation",
        ),
        (
            "bad.json",
            '[\n {"conversations": [{"from": "bot", "value": "x"}]}\n]',
            "bad.json:2:1: unknown speaker 'bot'",
        ),
        ("bad.json", '[\n {"conversations": [\n  {"from": "human", "value": }]}]', "bad.json:3:"),
        ("bad.txt", "hello", "bad.txt:1:1: a dataset is .jsonl, .csv or .json"),
    ],
)
def test_a_bad_dataset_names_file_and_line(
    tmp_path: Path, name: str, text: str, where: str
) -> None:
    with pytest.raises(ScenarioError) as raised:
        load_dataset(write(tmp_path / name, text))
    assert str(raised.value).startswith(str(tmp_path / where.split(":")[0]))
    assert where.split(":", 1)[1] in str(raised.value), str(raised.value)


def test_sequential_entries_are_dealt_every_count_th_from_the_process_index() -> None:
    from tpot_locust.harness.users.turns import dataset_position

    assert [dataset_position(k, 0, 1, 4) for k in range(6)] == [0, 1, 2, 3, 0, 1]
    dealt = [[dataset_position(k, index, 3, 7) for k in range(3)] for index in range(3)]
    assert dealt == [[0, 3, 6], [1, 4, 0], [2, 5, 1]]


def test_a_workers_users_wait_for_its_plan_before_taking_a_sequential_entry() -> None:
    """On a worker, Locust's spawn message can come before the master's plan: a user that
    took an entry then would take the first ones as if its worker were alone."""
    from types import SimpleNamespace

    import gevent

    from tpot_locust.harness.users.conversation_picks import process_share
    from tpot_locust.harness.users.user_context import user_context

    user = SimpleNamespace(environment=SimpleNamespace())
    context = user_context(user.environment)
    context.process_share = None  # a worker before its plan
    gevent.spawn_later(0.05, setattr, context, "process_share", (1, 2))
    assert process_share(user.environment) == (1, 2)
