"""Published traces read as their publishers ship them: format told by the first row,
units, conversations, filters, options, and every error named by file:line."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.helpers.small_tokenizer import build_tokenizer
from tpot_locust.common.tokens import load_tokenizer
from tpot_locust.scenario.loader import load_scenario
from tpot_locust.scenario.model import TraceSpec
from tpot_locust.scenario.prompts import blocks_text
from tpot_locust.scenario.trace import sessions
from tpot_locust.scenario.trace_formats import load_trace_spec
from tpot_locust.scenario.yaml_source import ScenarioError, ScenarioErrors

TRACES = ROOT / "scenarios" / "traces"


def load(name: str, **options: object) -> tuple[str, list]:
    return load_trace_spec(TraceSpec(file=str(TRACES / name), **options))  # type: ignore[arg-type]


def test_mooncake_times_in_ms_and_512_token_blocks() -> None:
    fmt, requests = load("mooncake_sample.jsonl")
    assert fmt == "mooncake" and len(requests) == 8
    assert [r.t_s for r in requests[:3]] == [0.0, 0.15, 0.4]
    first = requests[0]
    assert (first.input_tokens, first.output_tokens, first.blocks) == (1100, 24, (0, 1, 2))
    assert first.block_tokens == 512 and not first.whole_context


def test_bailian_conversations_from_parent_links_in_turn_order() -> None:
    fmt, requests = load("bailian_sample.jsonl")
    assert fmt == "bailian"
    conversations = sessions(requests)
    assert [[r.line for r in turns] for turns in conversations] == [[1, 3, 6], [2, 5], [4]]
    assert all(r.whole_context and r.block_tokens == 16 for r in requests)
    assert [r.t_s for r in conversations[0]] == [0.0, 0.9, 2.3]


def test_a_long_bailian_chain_costs_its_length_once(tmp_path: Path) -> None:
    """Issue 43, item 5: a 20,000-turn parent chain walked again from each chat took 31 s."""
    turns = 20_000
    rows = [
        f'{{"chat_id": {i}, "parent_chat_id": {i - 1 if i else -1}, "timestamp": {i * 0.01}, '
        f'"input_length": 10, "output_length": 2, "hash_ids": [0], "turn": {i + 1}}}'
        for i in range(turns)
    ]
    path = tmp_path / "chain.jsonl"
    path.write_text("\n".join(rows) + "\n")
    started = time.monotonic()
    fmt, requests = load_trace_spec(TraceSpec(file=str(path)))
    assert fmt == "bailian" and len(requests) == turns
    assert {r.session for r in requests} == {"bailian-0"}
    assert time.monotonic() - started < 5  # noqa: PLR2004


def test_a_csv_field_past_the_csv_modules_cap_is_a_line_error(tmp_path: Path) -> None:
    """Issue 43, item 7: a field over 131,072 characters was a ``_csv.Error`` traceback."""
    path = tmp_path / "azure.csv"
    path.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:15:46.6805900,374,44\n"
        f"2023-11-16 18:15:46.9951690,{'9' * 200_000},44\n"
    )
    with pytest.raises(ScenarioError) as caught:
        load_trace_spec(TraceSpec(file=str(path)))
    assert str(caught.value).startswith(f"{path}:3:")
    assert "ContextTokens" in str(caught.value) and len(str(caught.value)) < 400


def test_azure_datetimes_and_crlf() -> None:
    fmt, requests = load("azure_sample.csv")
    assert fmt == "azure" and len(requests) == 6
    assert requests[0].t_s == 0.0 and requests[1].t_s == pytest.approx(0.314579)
    assert (requests[0].input_tokens, requests[0].output_tokens) == (374, 44)


def test_burstgpt_leaves_out_failed_rows_and_filters() -> None:
    fmt, requests = load("burstgpt_sample.csv")
    assert fmt == "burstgpt" and len(requests) == 5  # one had 0 response tokens
    _, gpt4 = load("burstgpt_sample.csv", model="GPT-4")
    assert [(r.input_tokens, r.output_tokens) for r in gpt4] == [(120, 25), (95, 12)]
    _, conversation = load("burstgpt_sample.csv", log_type="Conversation log")
    assert len(conversation) == 3 and conversation[0].t_s == 0.0


def test_window_count_and_scaling() -> None:
    _, requests = load(
        "mooncake_sample.jsonl",
        start=0.3,
        duration=1.5,
        max_requests=2,
        scale_input=0.5,
        scale_output=0.5,
    )
    assert [r.t_s for r in requests] == pytest.approx([0.1, 0.6])
    assert requests[0].block_tokens == 256 and requests[0].blocks == (0, 4)
    assert requests[0].input_tokens == 300 and requests[0].output_tokens == 10


def test_shared_blocks_give_identical_leading_text() -> None:
    _, requests = load("mooncake_sample.jsonl")
    texts = [blocks_text(r.blocks, r.block_tokens, r.input_tokens) for r in requests]
    assert [len(text.split()) for text in texts] == [r.input_tokens for r in requests]
    a, b, c = (text.split() for text in texts[:3])
    assert a[:1024] == b[:1024] and a[1024:1100] != b[1024:1100]  # blocks 0, 1 shared
    assert a[:512] == c[:512] and a[512:600] != c[512:600]  # block 0 only


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        (
            "m.jsonl",
            '{"timestamp": 0, "input_length": 600, "output_length": 4, "hash_ids": [1]}',
            "m.jsonl:1.*1 blocks of 512 tokens do not hold input_length 600",
        ),
        (
            "m.jsonl",
            '{"timestamp": -1, "input_length": 6, "output_length": 4, "hash_ids": [1]}',
            "m.jsonl:1.*timestamp: must be a number >= 0",
        ),
        (
            "b.jsonl",
            '{"chat_id": 1, "parent_chat_id": 1, "timestamp": 0, "input_length": 6, '
            '"output_length": 4, "turn": 1, "hash_ids": [1]}',
            "b.jsonl:1.*back to itself",
        ),
        (
            "a.csv",
            "TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,4,4\n",
            "a.csv:2.*TIMESTAMP: not a date and time",
        ),
        (
            "g.csv",
            "Timestamp,Model,Request tokens,Response tokens\n1,GPT-4,0,5\n",
            "g.csv:2.*Request tokens: must be an integer >= 1",
        ),
        ("x.csv", "when,what\n1,2\n", "x.csv:1.*not a trace format we know"),
    ],
)
def test_bad_rows_are_named_by_file_and_line(
    tmp_path: Path, name: str, text: str, message: str
) -> None:
    path = tmp_path / name
    path.write_text(text + ("\n" if not text.endswith("\n") else ""))
    with pytest.raises(ScenarioError, match=message):
        load_trace_spec(TraceSpec(file=str(path)))


def test_blocks_with_a_tokenizer_are_exact_and_shared(tmp_path: Path) -> None:
    """With a tokenizer each block is exactly its tokens: a prompt of blocks is exactly its
    input length, and shared leading blocks are the same text."""
    exact = load_tokenizer(build_tokenizer(tmp_path / "tokenizer"))
    _, requests = load("mooncake_sample.jsonl", scale_input=0.1)  # 52-token blocks
    texts = [blocks_text(r.blocks, r.block_tokens, r.input_tokens, exact) for r in requests]
    assert [exact.count(text) for text in texts] == [r.input_tokens for r in requests]
    first_block = blocks_text((0,), requests[0].block_tokens, requests[0].block_tokens, exact)
    assert all(
        text.startswith(first_block)
        for text, r in zip(texts, requests, strict=True)
        if r.blocks[0] == 0
    )


@pytest.mark.parametrize(
    ("trace", "message"),
    [
        (
            "{file: MOONCAKE, format: csv}",
            r"classes.replay.trace.format.*must be one of auto, jsonl, mooncake",
        ),
        ("{file: MOONCAKE, start: -2}", r"classes.replay.trace.start"),
        ("{format: azure}", r"classes.replay.trace.*file: is required"),
        (
            "{file: MOONCAKE, model: GPT-4}",
            r"classes.replay.trace.model.*only for BurstGPT traces \(this one reads as mooncake\)",
        ),
    ],
)
def test_a_trace_mapping_is_checked_where_it_is_written(
    tmp_path: Path, trace: str, message: str
) -> None:
    scenario = tmp_path / "t.yaml"
    trace = trace.replace("MOONCAKE", str(TRACES / "mooncake_sample.jsonl"))
    scenario.write_text(f"name: t\nduration: 5s\nclasses:\n  replay:\n    trace: {trace}\n")
    with pytest.raises(ScenarioErrors, match=message):
        load_scenario(scenario)
