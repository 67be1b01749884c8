"""Turns the stamped ``data`` payloads of an OpenAI-style stream into token events.

Runs once per request after the stream has ended, so JSON decoding stays off the per-event
path; the stamps were taken on arrival, before any decoding. Plain token chunks (non-empty
content, ``"finish_reason":null``, no usage, error, tool call or reasoning field: nearly all
events of a stream) are recognised by a byte scan, and their text is JSON-decoded once per
request; every other event is decoded in full. Both paths give identical timings (tested).
Rules (see README, "Metric definitions"): a token event carries at least one generated
token (content, reasoning or tool-call delta; empty strings and role-only, usage-only or
keep-alive events are not);
``k`` tokens per event come from per-chunk usage when every token event carries it, else
1; the output count ``n`` is ``usage.completion_tokens`` when reported, else the sum of k.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from tpot_locust.errors import (
    BAD_JSON,
    CONNECTION_RESET,
    EMPTY_STREAM,
    STREAM_ERROR_EVENT,
    TRUNCATED,
    StreamError,
)

DONE = b"[DONE]"
# More tokens than this in one event (from per-chunk usage growth) is not believable: the
# per-chunk counts are then ignored (one token per event), so a lying server cannot make
# the TPOT histogram allocate billions of samples.
MAX_TOKENS_PER_EVENT = 4096


_PLAIN_MARK = b'"finish_reason":null'
_NOT_PLAIN = re.compile(rb'"(?:usage|error|tool_calls|reasoning)')
_TEXT_MARKERS = {"chat": b'"content":"', "completions": b'"text":"'}
_QUOTE = 34
_BACKSLASH = 92


def plain_text_at(payload: bytes, start: int) -> bytes:
    """The raw JSON string body that starts at ``start`` (up to its unescaped quote)."""
    end = payload.find(b'"', start)
    while end > start:
        backslashes = 0
        while payload[end - 1 - backslashes] == _BACKSLASH:
            backslashes += 1
        if backslashes % 2 == 0:
            return payload[start:end]
        end = payload.find(b'"', end + 1)
    return b""


def _joined_text(parts: list[str | bytes]) -> str:
    """Text from decoded strings and raw JSON string bodies (each run decoded at once)."""
    pieces: list[str] = []
    raw: list[bytes] = []
    for part in [*parts, ""]:
        if isinstance(part, bytes):
            raw.append(part)
            continue
        if raw:
            try:
                pieces.append(json.loads(b'"' + b"".join(raw) + b'"'))
            except ValueError:
                pieces.append(b"".join(raw).decode("utf-8", "replace"))
            raw = []
        pieces.append(part)
    return "".join(pieces)


@dataclass
class DecodedStream:
    token_stamps: list[int] = field(default_factory=list)
    token_counts: list[int] = field(default_factory=list)
    text_parts: list[str | bytes] = field(default_factory=list)
    finish_reason: str | None = None
    done: bool = False
    completion_tokens: int | None = None
    prompt_tokens: int | None = None
    counts_from_usage: bool = False
    error: StreamError | None = None

    @property
    def text(self) -> str:
        return _joined_text(self.text_parts)

    @property
    def output_tokens(self) -> int:
        if self.completion_tokens is not None:
            return self.completion_tokens
        return sum(self.token_counts)

    @property
    def tokens_estimated(self) -> bool:
        return self.completion_tokens is None


def _delta_tokens(choice: dict[str, Any], api: str) -> tuple[bool, str]:
    """Whether a choice carries a generated token, and its visible text."""
    if api == "completions":
        text = choice.get("text")
        return bool(text), text if isinstance(text, str) else ""
    delta = choice.get("delta") or choice.get("message") or {}
    if not isinstance(delta, dict):
        return False, ""
    content = delta.get("content")
    reasoning = delta.get("reasoning_content") or delta.get("reasoning")
    carries = bool(content) or bool(reasoning) or bool(delta.get("tool_calls"))
    return carries, content if isinstance(content, str) else ""


def decode_events(
    stamps: list[int],
    payloads: list[bytes],
    api: str,
    reset: bool = False,
    fast: bool = True,
    want_text: bool = True,
) -> DecodedStream:
    """Decode every event; a failure is returned in ``error``, never raised.

    ``fast=False`` decodes every event in full (the reference the fast path is tested by).
    """
    result = DecodedStream()
    usage_seen_on_all = True
    usage_believable = True
    last_usage_count = 0
    marker = _TEXT_MARKERS.get(api, _TEXT_MARKERS["chat"]) if fast else b"\0"
    skip = len(marker)
    token_stamps, token_counts, text_parts = (
        result.token_stamps,
        result.token_counts,
        result.text_parts,
    )
    for stamp, payload in zip(stamps, payloads, strict=True):
        # Fast path: a plain token event (one choice: we always request n=1). The checks
        # run cheapest and most selective first; anything unusual is decoded in full.
        at = payload.find(marker)
        if (
            at > 0
            and payload[at + skip : at + skip + 1] not in (b'"', b"")  # non-empty: a token
            and _PLAIN_MARK in payload
            and payload[-1:] == b"}"  # the event is a whole object
            and _NOT_PLAIN.search(payload) is None
        ):
            usage_seen_on_all = False  # a plain token event carries no usage
            token_stamps.append(stamp)
            token_counts.append(1)
            if want_text:
                text_parts.append(plain_text_at(payload, at + skip))
            continue
        if payload == DONE or payload.strip() == DONE:
            result.done = True
            break
        try:
            event = json.loads(payload)
        except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
            result.error = StreamError(BAD_JSON, f"invalid JSON in event: {payload[:80]!r}")
            return result
        if not isinstance(event, dict):
            result.error = StreamError(BAD_JSON, f"event is not a JSON object: {payload[:80]!r}")
            return result
        if event.get("error"):
            result.error = StreamError(STREAM_ERROR_EVENT, _error_message(event["error"]))
            return result
        usage = event.get("usage")
        usage_count = _usage_int(usage, "completion_tokens")
        if usage_count is not None:
            result.completion_tokens = usage_count
            prompt = _usage_int(usage, "prompt_tokens")
            if prompt is not None:
                result.prompt_tokens = prompt
        choices = event.get("choices") or []
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            continue
        choice = choices[0]
        carries, text = _delta_tokens(choice, api)
        if carries:
            if usage_count is None:
                usage_seen_on_all = False
            tokens = 1
            if usage_seen_on_all and usage_count is not None:
                tokens = max(usage_count - last_usage_count, 1)
                last_usage_count = usage_count
                if tokens > MAX_TOKENS_PER_EVENT:
                    usage_believable = False
            token_stamps.append(stamp)
            token_counts.append(tokens)
            if text and want_text:
                text_parts.append(text)
        if choice.get("finish_reason"):
            result.finish_reason = str(choice["finish_reason"])
    if not usage_believable:
        usage_seen_on_all = False
        result.token_counts = [1] * len(result.token_counts)
    result.counts_from_usage = bool(result.token_counts) and usage_seen_on_all
    if result.finish_reason is None:
        if not payloads and not reset:
            result.error = StreamError(EMPTY_STREAM, "stream ended without any event")
        elif result.done:
            result.error = StreamError(TRUNCATED, "[DONE] arrived without a finish_reason")
        elif reset:
            result.error = StreamError(CONNECTION_RESET, "connection reset before finish_reason")
        else:
            result.error = StreamError(TRUNCATED, "stream closed before finish_reason")
    elif not result.token_stamps:
        result.error = StreamError(EMPTY_STREAM, "finished without any token event")
    return result


def _usage_int(usage: Any, key: str) -> int | None:
    if not isinstance(usage, dict):
        return None
    value = usage.get(key)
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return None


def _error_message(error: Any) -> str:
    if isinstance(error, dict):
        return str(error.get("message") or error)[:200]
    return str(error)[:200]


def decode_error_body(body: bytes) -> str:
    """The message of an OpenAI-style error body, or the start of the raw body."""
    try:
        parsed = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return body[:200].decode("utf-8", "replace")
    if isinstance(parsed, dict) and "error" in parsed:
        return _error_message(parsed["error"])
    if isinstance(parsed, dict) and "detail" in parsed:
        return str(parsed["detail"])[:200]
    return body[:200].decode("utf-8", "replace")
