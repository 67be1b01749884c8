"""Texts of an exact token count for a local tokenizer, and clear errors for a bad one."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from tests.helpers.small_tokenizer import build_tokenizer
from tpot_locust.common.tokens import PIECE_TOKENS, TokenizerError, load_tokenizer
from tpot_locust.scenario.prompts import WORDS


@pytest.fixture(scope="module")
def tokenizer_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tokenizer(tmp_path_factory.mktemp("tok"))


@pytest.mark.parametrize("tokens", [1, 2, 7, 100, 513, 4000])
def test_a_text_encodes_to_exactly_the_tokens_asked_for(tokenizer_path: Path, tokens: int) -> None:
    tokenizer = load_tokenizer(tokenizer_path)
    rng = random.Random(tokens)
    for _ in range(5):
        assert tokenizer.count(tokenizer.text_of(tokens, rng, WORDS)) == tokens


def test_after_a_prefix_the_text_adds_exactly_the_tokens_asked_for(tokenizer_path: Path) -> None:
    tokenizer = load_tokenizer(tokenizer_path.parent)  # a folder holding tokenizer.json
    prefix = "You are a helpful assistant, answer briefly."
    text = tokenizer.text_of(50, random.Random(1), WORDS, prefix)
    assert text.startswith(prefix)
    assert tokenizer.count(text) == tokenizer.count(prefix) + 50


def test_a_long_text_is_built_in_pieces_and_lets_the_loop_run_between_them(
    tokenizer_path: Path,
) -> None:
    tokenizer = load_tokenizer(tokenizer_path)
    pauses: list[int] = []
    prefix = "You are a helpful assistant, answer briefly."
    text = tokenizer.text_of(1000, random.Random(3), WORDS, prefix, lambda: pauses.append(1))
    assert tokenizer.count(text) == tokenizer.count(prefix) + 1000
    assert len(pauses) == -(-1000 // PIECE_TOKENS)  # one after every piece
    assert tokenizer.count_prefix(prefix) == tokenizer.count(prefix)


def test_a_tokenizer_whose_pieces_do_not_add_up_gets_whole_texts(tokenizer_path: Path) -> None:
    tokenizer = load_tokenizer(tokenizer_path)
    tokenizer.text_of(10, random.Random(4), WORDS)  # checks this one: its pieces add up
    assert tokenizer._additive is True
    tokenizer._additive = False  # as found for one that merges across spaces
    try:
        pauses: list[int] = []
        text = tokenizer.text_of(700, random.Random(5), WORDS, pause=lambda: pauses.append(1))
        assert tokenizer.count(text) == 700 and not pauses
    finally:
        tokenizer._additive = True


def test_a_missing_tokenizer_is_named(tmp_path: Path) -> None:
    with pytest.raises(TokenizerError, match="no tokenizer.json there"):
        load_tokenizer(tmp_path)
    broken = tmp_path / "tokenizer.json"
    broken.write_text("{not json")
    with pytest.raises(TokenizerError, match=str(broken)):
        load_tokenizer(broken)


def test_the_tokenizer_option_sets_the_server_key(tmp_path: Path) -> None:
    from tpot_locust.cli.main import _with_tokenizer, build_parser

    args = build_parser().parse_args(
        ["run", "s.yaml", "--set", "a=1", "--tokenizer", str(tmp_path)]
    )
    assert _with_tokenizer(args) == ["a=1", f"server.tokenizer={tmp_path.resolve()}"]
