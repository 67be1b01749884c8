"""Prompts from a local file: JSONL, CSV or ShareGPT-style conversations.

A class's ``dataset: FILE`` replaces its synthetic prompts. Each entry is one conversation
(a list of turns): a JSONL line or CSV row gives one turn, its ``text`` (or ``prompt``) and
optionally ``output_tokens``; a ShareGPT-style JSON file (a list of ``{"conversations":
[{"from": "human", "value": ...}, {"from": "gpt", "value": ...}, ...]}``, also
``role``/``content`` messages) gives each user turn with the recorded answer after it,
whose length (in words, or tokens with ``server.tokenizer``) becomes that turn's
``max_tokens``. Every problem names ``file:line``.

The file is read with bounds (``common.bounded_files``): a regular file of at most
``DATA_FILE_MAX_BYTES``, JSONL and CSV line by line with a line-length cap; NaN and
Infinity are not JSON numbers here, and ``output_tokens`` is at most ``MAX_TOKENS``.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from tpot_locust.common.bounded_files import (
    DATA_FILE_MAX_BYTES,
    BoundedFileError,
    cached_by_file,
    read_lines,
    read_text,
)
from tpot_locust.scenario.limits import MAX_TOKENS
from tpot_locust.scenario.yaml_source import ScenarioError

TEXT_FIELDS = ("text", "prompt")
USER_ROLES = ("human", "user")
ANSWER_ROLES = ("gpt", "assistant", "chatgpt", "bard", "bing", "model")
SYSTEM_ROLES = ("system",)


@dataclass(frozen=True)
class DatasetTurn:
    """One user message, and the recorded answer after it (ShareGPT) or the output length
    given with it (JSONL, CSV); None: the class's ``output_tokens``."""

    text: str
    answer: str | None = None
    output_tokens: int | None = None


Conversation = tuple[DatasetTurn, ...]


@cached_by_file
def load_dataset(path: Path) -> list[Conversation]:
    source = str(path)
    suffix = path.suffix.lower()
    if suffix not in (".jsonl", ".csv", ".json"):
        raise ScenarioError(source, 1, 1, "", "a dataset is .jsonl, .csv or .json (ShareGPT)")
    try:
        if suffix == ".json":
            conversations = _sharegpt(source, read_text(path, DATA_FILE_MAX_BYTES))
        else:
            lines = (text for _, text in read_lines(path, DATA_FILE_MAX_BYTES))
            conversations = (_jsonl if suffix == ".jsonl" else _csv)(source, lines)
    except BoundedFileError as error:
        raise ScenarioError(source, error.line or 1, 1, "", str(error)) from None
    if not conversations:
        raise ScenarioError(source, 1, 1, "", "holds no prompt")
    return conversations


def _error(source: str, line: int, message: str) -> ScenarioError:
    return ScenarioError(source, line, 1, "", message)


def _refuse_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not a JSON number")


_STRICT_JSON = json.JSONDecoder(parse_constant=_refuse_constant)  # one for every line


def _json(text: str) -> object:
    """``json.loads`` without NaN or Infinity (Python's json accepts both)."""
    return _STRICT_JSON.decode(text)


def _one_turn(source: str, line: int, entry: object) -> Conversation:
    if not isinstance(entry, dict):
        raise _error(source, line, "must be an object with a text field")
    text = next((entry[f] for f in TEXT_FIELDS if f in entry), None)
    if not isinstance(text, str) or not text.strip():
        raise _error(source, line, f"needs a non-empty {' or '.join(TEXT_FIELDS)} field")
    output = entry.get("output_tokens")
    if output in (None, ""):
        return (DatasetTurn(text),)
    tokens = _output_tokens(output)
    if not 0 < tokens <= MAX_TOKENS or str(output).strip() not in (str(tokens), f"{tokens}.0"):
        raise _error(
            source,
            line,
            f"output_tokens: must be a positive integer <= "
            f"{MAX_TOKENS:,}, got {str(output)[:40]!r}",
        )
    return (DatasetTurn(text, output_tokens=tokens),)


def _output_tokens(output: Any) -> int:
    """The integer given, or 0 (refused) for anything else: NaN, infinity, a 5,000-digit
    string, a list."""
    if isinstance(output, bool):
        return 0
    try:
        return int(output)
    except (TypeError, ValueError, OverflowError):
        return 0


def _jsonl(source: str, lines: Iterable[str]) -> list[Conversation]:
    conversations = []
    for number, line in enumerate(lines, start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            entry = _json(line)
        except (ValueError, RecursionError) as error:
            raise _error(source, number, f"not JSON: {error}") from None
        conversations.append(_one_turn(source, number, entry))
    return conversations


def _csv(source: str, lines: Iterable[str]) -> list[Conversation]:
    reader = csv.DictReader(lines)
    conversations = []
    try:
        if not reader.fieldnames or not set(TEXT_FIELDS) & set(reader.fieldnames):
            raise _error(source, 1, f"the header needs a {' or '.join(TEXT_FIELDS)} column")
        for row in reader:
            conversations.append(_one_turn(source, reader.line_num, row))
    except csv.Error as error:
        raise _error(source, reader.line_num or 1, f"not CSV: {error}") from None
    return conversations


def _sharegpt(source: str, text: str) -> list[Conversation]:
    """Each item of the top-level list, with the line it starts on for its errors."""
    decoder = json.JSONDecoder(parse_constant=_refuse_constant)
    at = _skip_space(text, 0)
    if at >= len(text) or text[at] != "[":
        raise _error(source, _line(text, at), "a ShareGPT file is a JSON list of conversations")
    at = _skip_space(text, at + 1)
    conversations = []
    while at < len(text) and text[at] != "]":
        line = _line(text, at)
        try:
            item, at = decoder.raw_decode(text, at)
        except (ValueError, RecursionError) as error:
            raise _error(source, getattr(error, "lineno", line), f"not JSON: {error}") from None
        if turns := _conversation(source, line, item):
            conversations.append(turns)
        at = _skip_space(text, at)
        if at < len(text) and text[at] == ",":
            at = _skip_space(text, at + 1)
        elif at < len(text) and text[at] != "]":
            raise _error(source, _line(text, at), "expected , or ] between conversations")
    return conversations


def _conversation(source: str, line: int, item: object) -> Conversation:
    messages = item.get("conversations", item.get("messages")) if isinstance(item, dict) else None
    if not isinstance(messages, list):
        raise _error(source, line, "a conversation needs a conversations (or messages) list")
    turns: list[DatasetTurn] = []
    pending: str | None = None
    for message in messages:
        if not isinstance(message, dict):
            raise _error(source, line, "each message must be an object")
        role = str(message.get("from", message.get("role", ""))).lower()
        value = message.get("value", message.get("content"))
        if not isinstance(value, str):
            raise _error(source, line, f"a {role or 'message'} message needs a text value")
        if role in USER_ROLES:
            if pending is not None:  # two user turns in a row: the first had no answer
                turns.append(DatasetTurn(pending))
            pending = value
        elif role in ANSWER_ROLES:
            if pending is not None:
                turns.append(DatasetTurn(pending, answer=value))
                pending = None
        elif role not in SYSTEM_ROLES:
            raise _error(source, line, f"unknown speaker {role!r} (human, gpt, user, assistant)")
    if pending is not None:
        turns.append(DatasetTurn(pending))
    return tuple(turns)


def _skip_space(text: str, at: int) -> int:
    while at < len(text) and text[at] in " \t\r\n":
        at += 1
    return at


def _line(text: str, at: int) -> int:
    return text.count("\n", 0, at) + 1
