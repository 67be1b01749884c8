"""Request traces: one request per JSONL line, replayed open loop at its timestamp.

    {"t": 0.25, "input_tokens": 512, "output_tokens": 128}
    {"t": 1.5, "prompt": "Explain KV caches.", "output_tokens": 64, "session": "u7"}

``t`` is seconds from the start of the trace; the input is ``input_tokens`` (synthetic text of
that many tokens) or ``prompt`` (the text itself); ``session`` groups the turns of one
conversation, sent in order with the answers appended (a turn waits for the one before it).
Lines that are blank or start with ``#`` are skipped. Each error names ``file:line``.

Every line is checked on load, so one bad line stops the run before it starts (a ``t`` of
NaN once killed the replay mid-run): ``t`` finite, 0 .. 30 days; token counts 1 ..
``MAX_TOKENS``; no NaN or Infinity. The file is read with bounds
(``common.bounded_files``: a regular file, ``DATA_FILE_MAX_BYTES``, a line-length cap).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from tpot_locust.common.bounded_files import (
    DATA_FILE_MAX_BYTES,
    BoundedFileError,
    cached_by_file,
    read_lines,
)
from tpot_locust.scenario.limits import MAX_DURATION_S, MAX_TOKENS
from tpot_locust.scenario.yaml_source import ScenarioError

TRACE_KEYS = {"t", "input_tokens", "prompt", "output_tokens", "session"}


@dataclass(frozen=True)
class TraceRequest:
    t_s: float
    output_tokens: int
    input_tokens: int | None = None
    prompt: str | None = None
    session: str | None = None
    line: int = 0
    # a published trace's prefix blocks (``trace_formats``): requests sharing leading ids
    # share that many leading blocks of ``block_tokens`` tokens of prompt (the last partial)
    blocks: tuple[int, ...] = ()
    block_tokens: int = 0
    whole_context: bool = False  # the input holds the conversation so far (no history added)
    turn: int = 0  # its place in its session where the trace numbers turns (Bailian)


@cached_by_file
def load_trace(path: Path) -> list[TraceRequest]:
    """Every request of the trace, in time order (a session's turns keep theirs)."""
    source = str(path)
    requests = []
    try:
        for number, line in read_lines(path, DATA_FILE_MAX_BYTES):
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            requests.append(_request(source, number, line))
    except BoundedFileError as error:
        raise ScenarioError(source, error.line or 1, 1, "", str(error)) from None
    if not requests:
        raise ScenarioError(source, 1, 1, "", "the trace has no request")
    return sorted(requests, key=lambda request: (request.t_s, request.line))


def _request(source: str, number: int, line: str) -> TraceRequest:
    def error(message: str) -> ScenarioError:
        return ScenarioError(source, number, 1, "", message)

    try:
        row = _STRICT_JSON.decode(line)
    except (ValueError, RecursionError) as exc:
        raise error(f"not a JSON object: {exc}") from None
    if not isinstance(row, dict):
        raise error("not a JSON object")
    if unknown := sorted(set(row) - TRACE_KEYS):
        raise error(f"unknown key {unknown[0]!r}; allowed: {', '.join(sorted(TRACE_KEYS))}")
    t_s = _number(row.get("t"), "t", error, minimum=0.0, maximum=MAX_DURATION_S)
    output = _integer(row.get("output_tokens"), "output_tokens", error)
    if ("input_tokens" in row) == ("prompt" in row):
        raise error("needs exactly one of input_tokens (a length) or prompt (the text)")
    prompt = row.get("prompt")
    if prompt is not None and (not isinstance(prompt, str) or not prompt.strip()):
        raise error("prompt: must be a non-empty string")
    inputs = _integer(row["input_tokens"], "input_tokens", error) if "input_tokens" in row else None
    session = row.get("session")
    return TraceRequest(
        t_s, output, inputs, prompt, None if session is None else str(session), number
    )


_Error = Callable[[str], ScenarioError]  # one line's error, from its message


def _refuse_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not a JSON number")


_STRICT_JSON = json.JSONDecoder(parse_constant=_refuse_constant)  # one for every line


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _number(value: object, key: str, error: _Error, minimum: float, maximum: float) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not minimum <= value <= maximum  # NaN compares false; before float(): no overflow
        or not math.isfinite(value)
    ):
        raise error(
            f"{key}: must be a number >= {minimum:g} and <= {maximum:.0f}, got {_shown(value)}"
        )
    return float(value)


def _integer(value: object, key: str, error: _Error) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_TOKENS:
        raise error(f"{key}: must be an integer >= 1 and <= {MAX_TOKENS:,}, got {_shown(value)}")
    return value


def sessions(requests: list[TraceRequest]) -> list[list[TraceRequest]]:
    """The trace as conversations, each in turn order, ordered by their first turn; a
    request without a session is a conversation of its own."""
    grouped: dict[str, list[TraceRequest]] = {}
    for request in requests:
        key = request.session if request.session is not None else f"\0{request.line}"
        grouped.setdefault(key, []).append(request)
    conversations = [sorted(turns, key=lambda turn: turn.turn) for turns in grouped.values()]
    return sorted(conversations, key=lambda turns: (turns[0].t_s, turns[0].line))


def share_of(
    conversations: list[list[TraceRequest]], index: int, count: int
) -> list[list[TraceRequest]]:
    """This process's share (process ``index`` of ``count``): every ``count``-th
    conversation in time order, so each is sent whole by one process and none twice."""
    return conversations[index::count]


__all__ = ["TraceRequest", "load_trace", "sessions", "share_of"]
