"""Published request traces, read as their publishers ship them (``trace: {file, format}``).

- ``mooncake`` (kvcache-ai/Mooncake, FAST'25, JSONL): ``timestamp`` (ms), ``input_length``,
  ``output_length``, ``hash_ids`` (one id per 512-token block, the last one partial).
- ``bailian`` (alibaba-edu/qwen-bailian-usagetraces-anon, JSONL): ``chat_id``,
  ``parent_chat_id`` (-1: a conversation's first), ``timestamp`` (s), ``input_length``,
  ``output_length``, ``type``, ``turn``, ``hash_ids`` (16-token blocks). Conversations are
  rebuilt from the parent links, turns in order; each row already holds its whole context.
- ``azure`` (Azure/AzurePublicDataset, CSV): ``TIMESTAMP`` (a date and time: 2023's with 7
  fractional digits, 2024's with an offset and the fraction sometimes missing),
  ``ContextTokens``, ``GeneratedTokens``; times from the first row.
- ``burstgpt`` (HPMLL/BurstGPT, CSV): ``Timestamp`` (s), ``Model``, ``Request tokens``,
  ``Response tokens``, ``Total tokens``, ``Log Type`` (later columns ignored); a request with
  0 response tokens failed at the source and is left out; ``model`` and ``log_type`` filter.
- ``jsonl``: ours (``scenario.trace``).

Not given, the format is told by the first row's keys or the header. Each error names
``file:line``. Every published length is checked as ours are (1 .. ``MAX_TOKENS``).
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, NoReturn

from tpot_locust.common.bounded_files import DATA_FILE_MAX_BYTES, BoundedFileError, read_lines
from tpot_locust.scenario.limits import MAX_DURATION_S, MAX_TOKENS
from tpot_locust.scenario.model import TraceSpec
from tpot_locust.scenario.trace import TraceRequest, load_trace
from tpot_locust.scenario.yaml_source import ScenarioError

FORMATS = ("jsonl", "mooncake", "bailian", "azure", "burstgpt")
AUTO = "auto"  # told by the file's first row
MOONCAKE_BLOCK_TOKENS = 512
BAILIAN_BLOCK_TOKENS = 16
AZURE_HEADER = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
BURSTGPT_HEADER = ("Timestamp", "Model", "Request tokens", "Response tokens")
_MOONCAKE_KEYS = {"timestamp", "input_length", "output_length", "hash_ids"}
_BAILIAN_KEYS = _MOONCAKE_KEYS | {"chat_id", "parent_chat_id", "type", "turn"}
MAX_BLOCK_IDS = 1_000_000  # hash ids of one request (a 512-token block each: far past any model)

Row = tuple[int, Any]  # (line number, the parsed row)
_Error = Callable[[str], ScenarioError]  # one file:line's error, from its message (``_error``)


def detect_format(source: str, first_line: str) -> str:
    """The format a file's first row says it is in; raises ``ScenarioError`` when none fits."""
    text = first_line.strip().lstrip("\ufeff")
    if text.startswith("{"):
        try:
            keys = set(json.loads(text))
        except (ValueError, TypeError):
            keys = set()
        if "chat_id" in keys:
            return "bailian"
        if {"timestamp", "input_length"} <= keys:
            return "mooncake"
        return "jsonl"
    header = tuple(cell.strip() for cell in _csv_cells(source, 1, text))
    if header[: len(AZURE_HEADER)] == AZURE_HEADER:
        return "azure"
    if header[: len(BURSTGPT_HEADER)] == BURSTGPT_HEADER:
        return "burstgpt"
    raise ScenarioError(
        source,
        1,
        1,
        "",
        "not a trace format we know (a JSONL trace, or a CSV "
        f"header of Azure's {','.join(AZURE_HEADER)} or BurstGPT's "
        f"{','.join(BURSTGPT_HEADER)}); name it with format:",
    )


def load_trace_spec(spec: TraceSpec) -> tuple[str, list[TraceRequest]]:
    """The trace a scenario names, read in its format (told by its first row where not
    given) and cut and scaled as its options say; with the format it was read in."""
    path = Path(spec.file)
    fmt = spec.format
    if fmt == AUTO:
        rows = [line for _, line in _lines(path) if not line.lstrip().startswith("#")]
        fmt = detect_format(str(path), rows[0] if rows else "")
    if fmt == "jsonl":
        requests = load_trace(path)
    else:
        requests = read_published(path, fmt, spec.model, spec.log_type)
    return fmt, _cut_and_scaled(str(path), requests, spec)


def _cut_and_scaled(
    source: str, requests: list[TraceRequest], spec: TraceSpec
) -> list[TraceRequest]:
    """The requests in ``[start, start + duration)`` (times from ``start``), the first
    ``max_requests`` of them, lengths scaled (a block's tokens with its prompt's, so that
    requests sharing blocks still share that many leading tokens)."""
    end = math.inf if spec.duration is None else spec.start + spec.duration
    kept = [
        replace(request, t_s=request.t_s - spec.start)
        for request in requests
        if spec.start <= request.t_s < end
    ]
    if spec.max_requests is not None:
        kept = kept[: spec.max_requests]
    if not kept:
        raise ScenarioError(
            source,
            1,
            1,
            "",
            f"no request of the trace in its window "
            f"(start {spec.start:g} s, duration {spec.duration} s)",
        )
    if spec.scale_input == 1.0 and spec.scale_output == 1.0:
        return kept
    return [_scaled(request, spec.scale_input, spec.scale_output) for request in kept]


def _scaled(request: TraceRequest, scale_input: float, scale_output: float) -> TraceRequest:
    output = min(max(1, round(request.output_tokens * scale_output)), MAX_TOKENS)
    if request.input_tokens is None:  # a prompt given as text: kept as it is
        return replace(request, output_tokens=output)
    inputs = min(max(1, round(request.input_tokens * scale_input)), MAX_TOKENS)
    block_tokens = request.block_tokens
    if request.blocks:
        block_tokens = max(1, round(block_tokens * scale_input))
        count = len(request.blocks)  # as many blocks, each shorter: prefixes stay shared
        inputs = min(max(inputs, (count - 1) * block_tokens + 1), count * block_tokens)
    return replace(request, output_tokens=output, input_tokens=inputs, block_tokens=block_tokens)


def read_published(
    path: Path, fmt: str, model: str | None = None, log_type: str | None = None
) -> list[TraceRequest]:
    """Every request of a published trace, in time order, times from the trace's start."""
    source = str(path)
    lines = _lines(path)
    reader = _READERS[fmt]
    requests = reader(source, lines, model, log_type)
    if not requests:
        raise ScenarioError(source, 1, 1, "", "the trace has no request (after its filters)")
    start = min(request.t_s for request in requests)
    shifted = [replace(request, t_s=request.t_s - start) for request in requests]
    return sorted(shifted, key=lambda request: (request.t_s, request.line))


def _lines(path: Path) -> list[tuple[int, str]]:
    try:
        return [
            (number, line) for number, line in read_lines(path, DATA_FILE_MAX_BYTES) if line.strip()
        ]
    except BoundedFileError as error:
        raise ScenarioError(str(path), error.line or 1, 1, "", str(error)) from None


def _mooncake(source: str, lines: list[tuple[int, str]], *_: object) -> list[TraceRequest]:
    requests = []
    for number, row in _json_rows(source, lines, _MOONCAKE_KEYS):
        error = _error(source, number)
        t_ms = _number(row.get("timestamp"), "timestamp", error, 0.0, MAX_DURATION_S * 1000)
        inputs = _tokens(row.get("input_length"), "input_length", error)
        blocks = _blocks(row.get("hash_ids"), inputs, MOONCAKE_BLOCK_TOKENS, error)
        requests.append(
            TraceRequest(
                t_ms / 1000,
                _tokens(row.get("output_length"), "output_length", error),
                inputs,
                line=number,
                blocks=blocks,
                block_tokens=MOONCAKE_BLOCK_TOKENS,
            )
        )
    return requests


def _bailian(source: str, lines: list[tuple[int, str]], *_: object) -> list[TraceRequest]:
    rows: dict[int, tuple[int, dict[str, Any]]] = {}
    for number, row in _json_rows(source, lines, _BAILIAN_KEYS):
        chat_id = _identifier(row.get("chat_id"), "chat_id", _error(source, number))
        if chat_id in rows:
            raise _error(source, number)(
                f"chat_id {chat_id} again (first on line {rows[chat_id][0]})"
            )
        rows[chat_id] = (number, row)
    requests = []
    roots: dict[int, int] = {}  # each chat's conversation's first, found once
    for chat_id, (number, row) in rows.items():
        error = _error(source, number)
        t_s = _number(row.get("timestamp"), "timestamp", error, 0.0, MAX_DURATION_S)
        inputs = _tokens(row.get("input_length"), "input_length", error)
        blocks = _blocks(row.get("hash_ids"), inputs, BAILIAN_BLOCK_TOKENS, error)
        turn = _identifier(row.get("turn", 1), "turn", error)
        root = _root(chat_id, rows, error, roots)
        requests.append(
            TraceRequest(
                t_s,
                _tokens(row.get("output_length"), "output_length", error),
                inputs,
                session=f"bailian-{root}",
                line=number,
                blocks=blocks,
                block_tokens=BAILIAN_BLOCK_TOKENS,
                whole_context=True,
                turn=turn,
            )
        )
    return requests


def _root(
    chat_id: int, rows: dict[int, tuple[int, dict[str, Any]]], error: _Error, roots: dict[int, int]
) -> int:
    """The first chat of ``chat_id``'s conversation, following the parent links; every
    chat on the way remembers it in ``roots``, so a file's chains cost their length once
    (walked again from each chat, a 20,000-turn chain took 31 s)."""
    path = [chat_id]
    on_path = {chat_id}
    current = chat_id
    while current not in roots:
        parent = rows[current][1].get("parent_chat_id", -1)
        if parent == -1 or parent not in rows:  # a parent outside the file: it starts here
            roots[current] = current
            break
        if parent in on_path:
            raise error(f"parent_chat_id links chat {chat_id} back to itself")
        path.append(parent)
        on_path.add(parent)
        current = parent
    root = roots[current]
    for chat in path:
        roots[chat] = root
    return root


def _azure(source: str, lines: list[tuple[int, str]], *_: object) -> list[TraceRequest]:
    requests = []
    for number, cells in _csv_rows(source, lines, AZURE_HEADER):
        error = _error(source, number)
        stamp = _datetime(cells["TIMESTAMP"], error)
        requests.append(
            TraceRequest(
                stamp,
                _tokens(_int(cells["GeneratedTokens"]), "GeneratedTokens", error),
                _tokens(_int(cells["ContextTokens"]), "ContextTokens", error),
                line=number,
            )
        )
    return requests


def _burstgpt(
    source: str, lines: list[tuple[int, str]], model: str | None, log_type: str | None
) -> list[TraceRequest]:
    requests = []
    for number, cells in _csv_rows(source, lines, BURSTGPT_HEADER):
        error = _error(source, number)
        if model is not None and cells["Model"] != model:
            continue
        if log_type is not None and cells.get("Log Type") != log_type:
            continue
        response = _int(cells["Response tokens"])
        if response == 0:
            continue  # failed at the source: nothing was generated
        t_s = _number(_float(cells["Timestamp"]), "Timestamp", error, 0.0, MAX_DURATION_S)
        requests.append(
            TraceRequest(
                t_s,
                _tokens(response, "Response tokens", error),
                _tokens(_int(cells["Request tokens"]), "Request tokens", error),
                line=number,
            )
        )
    return requests


def _json_rows(source: str, lines: list[tuple[int, str]], keys: set[str]) -> Iterator[Row]:
    for number, line in lines:
        error = _error(source, number)
        try:
            row = _STRICT_JSON.decode(line.lstrip("\ufeff"))
        except (ValueError, RecursionError) as exc:
            raise error(f"not a JSON object: {exc}") from None
        if not isinstance(row, dict):
            raise error("not a JSON object")
        if missing := sorted({"timestamp", "input_length", "output_length"} - set(row)):
            raise error(f"missing {missing[0]!r}")
        if unknown := sorted(set(row) - keys):
            raise error(f"unknown key {unknown[0]!r}; allowed: {', '.join(sorted(keys))}")
        yield number, row


def _csv_rows(
    source: str, lines: list[tuple[int, str]], required: tuple[str, ...]
) -> Iterator[Row]:
    number, header_line = lines[0]
    header = [cell.strip() for cell in _csv_cells(source, number, header_line.lstrip("\ufeff"))]
    if header[: len(required)] != list(required):
        raise _error(source, number)(f"header must start {','.join(required)}")
    for number, line in lines[1:]:
        cells = _csv_cells(source, number, line)
        if len(cells) < len(required):
            raise _error(source, number)(f"{len(cells)} columns, the header has {len(header)}")
        yield number, {name: cell.strip() for name, cell in zip(header, cells, strict=False)}


def _csv_cells(source: str, number: int, line: str) -> list[str]:
    """One CSV row's cells; what the csv module refuses is this file:line's error."""
    try:
        return next(csv.reader([line]), [])
    except csv.Error as error:
        raise _error(source, number)(f"not CSV: {error}") from None


def _blocks(value: object, inputs: int, block_tokens: int, error: _Error) -> tuple[int, ...]:
    """The prefix block ids: one per ``block_tokens`` of the input, the last one partial."""
    if value is None:
        return ()
    if not isinstance(value, list) or len(value) > MAX_BLOCK_IDS:
        raise error("hash_ids: must be a list of integers")
    if any(isinstance(item, bool) or not isinstance(item, int) or item < 0 for item in value):
        raise error("hash_ids: must be a list of integers >= 0")
    needed = math.ceil(inputs / block_tokens)
    if value and len(value) != needed:
        raise error(
            f"hash_ids: {len(value)} blocks of {block_tokens} tokens do not hold "
            f"input_length {inputs} (needs {needed})"
        )
    return tuple(value)


def _datetime(text: str, error: _Error) -> float:
    """Seconds since the epoch of Azure's TIMESTAMP (a time without an offset is UTC)."""
    try:
        stamp = datetime.fromisoformat(text.strip())  # 3.11+: 7 fractional digits, offsets
    except ValueError:
        raise error(f"TIMESTAMP: not a date and time: {text[:40]!r}") from None
    return (stamp if stamp.tzinfo else stamp.replace(tzinfo=timezone.utc)).timestamp()


def _int(text: str) -> int | str:
    try:
        return int(text)
    except ValueError:
        return text


def _float(text: str) -> float | str:
    try:
        return float(text)
    except ValueError:
        return text


def _tokens(value: object, key: str, error: _Error) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_TOKENS:
        raise error(f"{key}: must be an integer >= 1 and <= {MAX_TOKENS:,}, got {value!r:.40}")
    return value


def _identifier(value: object, key: str, error: _Error) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**63:
        raise error(f"{key}: must be an integer >= 0, got {value!r:.40}")
    return value


def _number(value: object, key: str, error: _Error, minimum: float, maximum: float) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not minimum <= value <= maximum
        or not math.isfinite(value)
    ):
        raise error(
            f"{key}: must be a number >= {minimum:g} and <= {maximum:.0f}, got {value!r:.40}"
        )
    return float(value)


def _error(source: str, number: int) -> Callable[[str], ScenarioError]:
    return lambda message: ScenarioError(source, number, 1, "", message)


def _refuse_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not a JSON number")


_STRICT_JSON = json.JSONDecoder(parse_constant=_refuse_constant)
_READERS: dict[str, Callable[..., list[TraceRequest]]] = {
    "mooncake": _mooncake,
    "bailian": _bailian,
    "azure": _azure,
    "burstgpt": _burstgpt,
}
