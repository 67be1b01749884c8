"""Validated view of a request body, in any API we speak: only the fields the simulator
acts on.

Each API's dialect (``tpot_locust.apis``) reads its own fields (``Dialect.sim_ask``).
Unknown fields are ignored (clients send many sampling options); fields the simulator uses are
checked and rejected with a 400 like vLLM does, so client error handling can be exercised.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from typing import Any

from ..apis import dialect_named
from ..apis.dialect import BadAsk, CountText
from ..apis.prompt_counts import count_chat_prompt, count_completion_prompt, count_words
from ..common.distributions import Distribution, sample_int

Api = str  # one of ``tpot_locust.apis.API_NAMES``
# A whole (non-streaming) answer is timed and built at once: 10^9 tokens of it held the
# server's loop for minutes. Streams of any length go token by token.
MAX_WHOLE_TOKENS = 100_000
# Reported to the client as an error JSON with its ``status``.
RequestError = BadAsk
__all__ = [
    "RequestError",
    "SimRequest",
    "count_chat_prompt",
    "count_completion_prompt",
    "count_words",
    "decide_length",
    "parse_request",
]


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
    # with --prefix-cache: the prompt's tokens (words or ids) until it is looked up, then
    # the tokens it found cached (``prefix_cache``); None without a prefix cache
    prompt_units: list[Any] | None = None
    cached_tokens: int | None = None
    # the first this many of ``completion_tokens`` are reasoning (--reasoning-tokens); at
    # least one answer token always follows them
    reasoning_tokens: int = 0


def parse_request(
    body: bytes,
    api: Api,
    *,
    request_id: str,
    default_model: str,
    default_max_tokens: int,
    adapters: tuple[str, ...] = (),
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
    dialect = dialect_named(api)
    ask = dialect.sim_ask(data, count_text, default_max_tokens)
    if ask.model is not None and ask.model != default_model and ask.model not in adapters:
        # vLLM's answer, so that a misspelt model is caught against the simulator too
        raise RequestError(f"The model `{ask.model}` does not exist.", status=404)
    if not ask.stream and not dialect.serves_whole:
        raise RequestError(f"{dialect.path} is served streaming only here: set stream true")
    if not ask.stream and ask.max_tokens > MAX_WHOLE_TOKENS:
        raise RequestError(
            f"a non-streaming answer of more than {MAX_WHOLE_TOKENS} tokens is not simulated"
        )
    return SimRequest(
        request_id=request_id,
        api=api,
        model=ask.model if ask.model is not None else default_model,
        prompt_tokens=ask.prompt_tokens,
        max_tokens=ask.max_tokens,
        min_tokens=ask.min_tokens,
        ignore_eos=ask.ignore_eos,
        stream=ask.stream,
        include_usage=ask.include_usage,
        continuous_usage=ask.continuous_usage,
        arrival_perf_ns=arrival_perf_ns,
    )


def decide_length(
    request: SimRequest, natural: Distribution, rng: random.Random, reasoning: int = 0
) -> None:
    """Set how many tokens the response has, why it ends, and how many of them are
    reasoning.

    With ``ignore_eos`` it is exactly ``max_tokens``; otherwise the "model" stops at a natural
    length drawn from ``natural``, but never before ``min_tokens`` nor after ``max_tokens``.
    ``reasoning`` tokens (drawn by the caller) come first, capped at ``max_tokens - 1`` so
    that at least one answer token follows; without ``ignore_eos`` the natural length is the
    answer's, after them.
    """
    reasoning = max(0, min(reasoning, request.max_tokens - 1))
    if request.ignore_eos:
        count = request.max_tokens
    else:
        count = max(request.min_tokens, reasoning + sample_int(natural, rng, minimum=1))
    if count >= request.max_tokens:
        request.completion_tokens, request.finish_reason = request.max_tokens, "length"
    else:
        request.completion_tokens, request.finish_reason = count, "stop"
    request.reasoning_tokens = min(reasoning, request.completion_tokens - 1)
