"""Request traces: one request per JSONL line, replayed open loop at its timestamp.

    {"t": 0.25, "input_tokens": 512, "output_tokens": 128}
    {"t": 1.5, "prompt": "Explain KV caches.", "output_tokens": 64, "session": "u7"}

``t`` is seconds from the start of the trace; the input is ``input_tokens`` (synthetic text of
that many tokens) or ``prompt`` (the text itself); ``session`` groups the turns of one
conversation, sent in order with the answers appended (a turn waits for the one before it).
Lines that are blank or start with ``#`` are skipped. Each error names ``file:line``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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


def load_trace(path: Path) -> list[TraceRequest]:
    """Every request of the trace, in time order (a session's turns keep theirs)."""
    source = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise ScenarioError(source, 1, 1, "", f"cannot read: {error.strerror or error}") from None
    requests = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        requests.append(_request(source, number, line))
    if not requests:
        raise ScenarioError(source, 1, 1, "", "the trace has no request")
    return sorted(requests, key=lambda request: (request.t_s, request.line))


def _request(source: str, number: int, line: str) -> TraceRequest:
    def error(message: str) -> ScenarioError:
        return ScenarioError(source, number, 1, "", message)

    try:
        row = json.loads(line)
    except ValueError as exc:
        raise error(f"not a JSON object: {exc}") from None
    if not isinstance(row, dict):
        raise error("not a JSON object")
    if unknown := sorted(set(row) - TRACE_KEYS):
        raise error(f"unknown key {unknown[0]!r}; allowed: {', '.join(sorted(TRACE_KEYS))}")
    t_s = _number(row.get("t"), "t", error, minimum=0.0)
    output = _integer(row.get("output_tokens"), "output_tokens", error)
    if ("input_tokens" in row) == ("prompt" in row):
        raise error("needs exactly one of input_tokens (a length) or prompt (the text)")
    prompt = row.get("prompt")
    if prompt is not None and (not isinstance(prompt, str) or not prompt.strip()):
        raise error("prompt: must be a non-empty string")
    inputs = _integer(row["input_tokens"], "input_tokens", error) if "input_tokens" in row else None
    session = row.get("session")
    return TraceRequest(t_s, output, inputs, prompt, None if session is None else str(session),
                        number)  # fmt: skip


def _number(value: Any, key: str, error: Any, minimum: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < minimum:
        raise error(f"{key}: must be a number >= {minimum:g}, got {value!r}")
    return float(value)


def _integer(value: Any, key: str, error: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise error(f"{key}: must be an integer >= 1, got {value!r}")
    return value


def sessions(requests: list[TraceRequest]) -> list[list[TraceRequest]]:
    """The trace as conversations, each in turn order, ordered by their first turn; a
    request without a session is a conversation of its own."""
    grouped: dict[str, list[TraceRequest]] = {}
    for request in requests:
        key = request.session if request.session is not None else f"\0{request.line}"
        grouped.setdefault(key, []).append(request)
    return sorted(grouped.values(), key=lambda turns: (turns[0].t_s, turns[0].line))


def share_of(
    conversations: list[list[TraceRequest]], index: int, count: int
) -> list[list[TraceRequest]]:
    """This process's share (process ``index`` of ``count``): every ``count``-th
    conversation in time order, so each is sent whole by one process and none twice."""
    return conversations[index::count]


__all__ = ["TraceRequest", "load_trace", "sessions", "share_of"]
