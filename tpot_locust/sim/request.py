"""Validated view of an OpenAI request body: only the fields the simulator acts on.

Unknown fields are ignored (clients send many sampling options); fields the simulator uses are
checked and rejected with a 400 like vLLM does, so client error handling can be exercised.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from ..common.distributions import Distribution, sample_int

Api = Literal["chat", "completions"]


class RequestError(Exception):
    """Reported to the client as an OpenAI-style error JSON with ``status``."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


@dataclass(slots=True)
class SimRequest:
    request_id: str
    api: Api
    model: str
    prompt_tokens: int
    max_tokens: int
    min_tokens: int
    ignore_eos: bool
    stream: bool
    include_usage: bool
    continuous_usage: bool
    arrival_perf_ns: int
    completion_tokens: int = 0
    finish_reason: str = "length"


# Python's ASCII whitespace, as ``str.split()`` splits on it.
_ASCII_SPACE = bytes(range(9, 14)) + bytes(range(28, 33))
_LONG_TEXT = 4096
MAX_INT_FIELD = 10**9  # max_tokens and the like: more is no request, only a hang


def count_words(value: Any) -> int:
    """``len(value.split())``; without the list of words for long ASCII text, whose
    building (2.3 ms for a 16k-word prompt) held the server's loop and every stream's
    next token: a burst of long prompts then slowed the gap-mode streams it must not."""
    if not isinstance(value, str):
        return 0
    if len(value) < _LONG_TEXT or not value.isascii():
        return len(value.split())
    if "  " not in value and not any(space in value for space in _OTHER_SPACES):
        return value.count(" ") + 1 - value.startswith(" ") - value.endswith(" ")
    marks = value.encode("ascii").translate(_SPACE_TO_0)  # 0 for a space, 1 for the rest
    # a word starts at a non-space that follows a space, or at the text's start
    return marks.count(b"\x00\x01") + (marks[:1] == b"\x01")


_OTHER_SPACES = tuple(chr(code) for code in _ASCII_SPACE if code != 32)
_SPACE_TO_0 = bytes(0 if i in _ASCII_SPACE else 1 for i in range(256))


CountText = Callable[[Any], int]  # tokens of a text: count_words, or a tokenizer's count


def _content_words(content: Any, count: CountText) -> int:
    if isinstance(content, list):  # multi-part content: count the text parts
        return sum(_text_tokens(p.get("text"), count) for p in content if isinstance(p, dict))
    return _text_tokens(content, count)


def _text_tokens(value: Any, count: CountText) -> int:
    return count(value) if isinstance(value, str) else 0


def count_chat_prompt(messages: Any, count: CountText = count_words) -> int:
    """Prompt tokens of a chat request = whitespace-separated words of all message contents
    (or their tokens by ``count``, each message on its own)."""
    if not isinstance(messages, list) or not messages:
        raise RequestError("'messages' must be a non-empty list")
    total = 0
    for message in messages:
        if not isinstance(message, dict):
            raise RequestError("each message must be an object")
        total += _content_words(message.get("content"), count)
    return total


def count_completion_prompt(prompt: Any, count: CountText = count_words) -> int:
    """Words (or tokens by ``count``) of a prompt string; token-id lists count one per id."""
    if isinstance(prompt, str):
        return count(prompt)
    if isinstance(prompt, list) and prompt:
        if all(isinstance(p, str) for p in prompt):
            return sum(count(p) for p in prompt)
        if all(isinstance(p, int) and not isinstance(p, bool) for p in prompt):
            return len(prompt)
        if all(isinstance(p, list) for p in prompt):
            return sum(len(p) for p in prompt)
    raise RequestError("'prompt' must be a string, a list of strings or a list of token ids")


def _int(body: dict[str, Any], key: str, default: int, minimum: int) -> int:
    value = body.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise RequestError(f"'{key}' must be an integer")
    if value < minimum:
        raise RequestError(f"'{key}' must be at least {minimum}, got {value}")
    if value > MAX_INT_FIELD:
        raise RequestError(f"'{key}' must be at most {MAX_INT_FIELD}")
    return value


def _bool(body: dict[str, Any], key: str) -> bool:
    value = body.get(key)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise RequestError(f"'{key}' must be a boolean")
    return value


def parse_request(
    body: bytes,
    api: Api,
    *,
    request_id: str,
    default_model: str,
    default_max_tokens: int,
    arrival_perf_ns: int,
    count_text: CountText = count_words,
) -> SimRequest:
    """Decode and validate a request body; raises ``RequestError`` for a 400."""
    try:
        data = json.loads(body)
    except (UnicodeDecodeError, ValueError) as exc:
        raise RequestError(f"request body is not valid JSON: {exc}") from None
    except RecursionError:  # deeply nested arrays or objects: a 400, not a dropped request
        raise RequestError("request body is nested too deeply") from None
    if not isinstance(data, dict):
        raise RequestError("request body must be a JSON object")
    if api == "chat":
        prompt_tokens = count_chat_prompt(data.get("messages"), count_text)
    else:
        prompt_tokens = count_completion_prompt(data.get("prompt"), count_text)
    model = data.get("model")
    if model is not None and model != default_model:
        # vLLM's answer, so that a misspelt model is caught against the simulator too
        raise RequestError(f"The model `{model}` does not exist.", status=404)
    # vLLM: max_completion_tokens (newer name) wins over max_tokens.
    max_tokens = _int(data, "max_completion_tokens", 0, 1) or _int(
        data, "max_tokens", default_max_tokens, 1
    )
    min_tokens = _int(data, "min_tokens", 0, 0)
    if min_tokens > max_tokens:
        raise RequestError(f"min_tokens ({min_tokens}) must be <= max_tokens ({max_tokens})")
    options = data.get("stream_options") or {}
    if not isinstance(options, dict):
        raise RequestError("'stream_options' must be an object")
    return SimRequest(
        request_id=request_id,
        api=api,
        model=default_model,
        prompt_tokens=prompt_tokens,
        max_tokens=max_tokens,
        min_tokens=min_tokens,
        ignore_eos=_bool(data, "ignore_eos"),
        stream=_bool(data, "stream"),
        include_usage=_bool(options, "include_usage"),
        continuous_usage=_bool(options, "continuous_usage_stats"),
        arrival_perf_ns=arrival_perf_ns,
    )


def decide_length(request: SimRequest, natural: Distribution, rng: random.Random) -> None:
    """Set how many tokens the response has and why it ends.

    With ``ignore_eos`` it is exactly ``max_tokens``; otherwise the "model" stops at a natural
    length drawn from ``natural``, but never before ``min_tokens`` nor after ``max_tokens``.
    """
    if request.ignore_eos:
        count = request.max_tokens
    else:
        count = max(request.min_tokens, sample_int(natural, rng, minimum=1))
    if count >= request.max_tokens:
        request.completion_tokens, request.finish_reason = request.max_tokens, "length"
    else:
        request.completion_tokens, request.finish_reason = count, "stop"
