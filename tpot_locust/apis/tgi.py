"""Hugging Face Text Generation Inference's generate API (``/generate_stream``).

Source: huggingface/text-generation-inference ``router/src/server.rs``
(``generate_stream_internal``) and ``router/src/lib.rs`` (``GenerateParameters``,
``StreamResponse``, ``StreamDetails``, ``ErrorResponse``). A request is ``{"inputs",
"parameters": {"max_new_tokens", "details"}}`` (the path implies streaming); TGI has no
``ignore_eos`` nor minimum length, so a stream may end early at the model's EOS. Each
``data:`` event is one generated token: ``{"index", "token": {"id", "text", "logprob",
"special"}, "generated_text": null, "details": null}`` (``top_tokens`` only when asked
for); the last token's event carries ``generated_text`` (the whole text) and, when
``details`` was asked, ``{"finish_reason": "length" | "eos_token" | "stop_sequence",
"generated_tokens", "seed", "input_length"}``: the finish reason and the usage. A failure
is ``{"error", "error_type"}`` (the shared error rule). Every event counts 1 token (a
special token too: it was generated; its text is not answer text). The generate API has no
reasoning channel: a reasoning model's thinking is inline text between ``<think>`` and
``</think>``, read as reasoning tokens (``think_tags.InlineThinking``).
"""

from __future__ import annotations

from typing import ClassVar

from tpot_locust.apis.dialect import (
    COMPLETION,
    MAX_INT_FIELD,
    SEQUENCE,
    TEXT,
    BadAsk,
    BodyOptions,
    CountText,
    Dialect,
    EventReading,
    SimAsk,
    SimContext,
    SimEvent,
    finish_words,
    text_of,
    token_count,
)
from tpot_locust.apis.think_tags import THINK_CLOSE, THINK_OPEN, InlineThinking

VALIDATION = 422  # TGI answers a request it refuses with 422 Unprocessable Entity
LOGPROB = -0.25  # the simulator's logprob of every token
_FINISH = {"length": "length", "stop": "eos_token"}  # the simulator's words -> TGI's


class TextGenerationInference(Dialect):
    """The dialect; each stream is read by its own ``TGIStream`` (``for_stream``)."""

    name: ClassVar[str] = "tgi"
    path: ClassVar[str] = "/generate_stream"
    models_path: ClassVar[str | None] = None  # the body names no model
    sim_reasoning: ClassVar[bool] = True  # inline, between <think> tags
    sim_think_tags: ClassVar[tuple[str, str] | None] = (THINK_OPEN, THINK_CLOSE)

    def body(self, history: list[dict[str, str]], options: BodyOptions) -> dict[str, object]:
        """``options.ignore_eos`` and ``force_min_tokens`` have no TGI parameter."""
        inputs = "\n\n".join(message["content"] for message in history)
        return {
            "inputs": inputs,
            "parameters": {"max_new_tokens": options.max_tokens, "details": True},
        }

    def for_stream(self) -> Dialect:
        return TGIStream()

    def read(self, event: dict[str, object], name: str | None) -> EventReading:
        """One event read on its own (no stream: thinking tags are not followed)."""
        return TGIStream().read(event, name)

    # -- simulator side ----------------------------------------------------------------------

    def sim_ask(self, data: dict[str, object], count: CountText, default_max_tokens: int) -> SimAsk:
        """TGI's default ``max_new_tokens`` is what the model's context leaves; here it is
        the simulator's default. ``details`` asks for the last event's details (usage)."""
        inputs = data.get("inputs")
        if not isinstance(inputs, str):
            raise BadAsk(_rejection("inputs", "expected a string"), VALIDATION)
        if not inputs:
            raise BadAsk("`inputs` cannot be empty", VALIDATION)
        params = data.get("parameters")
        params = {} if params is None else params
        if not isinstance(params, dict):
            raise BadAsk(_rejection("parameters", "expected struct GenerateParameters"), VALIDATION)
        details = params.get("details", False)
        if not isinstance(details, bool):
            raise BadAsk(_rejection("parameters.details", "expected a boolean"), VALIDATION)
        return SimAsk(
            prompt_tokens=count(inputs),
            max_tokens=_max_new_tokens(params, default_max_tokens),
            include_usage=details,
        )

    def sim_token(self, context: SimContext) -> SimEvent:
        """``index`` counts the stream's tokens from 1; the token's position stands in for
        its vocabulary id."""
        return None, _event(TEXT, None, None)

    def sim_reasoning_token(self, context: SimContext) -> SimEvent:
        """The same event: the thinking is inline text (``sim_think_tags``)."""
        return self.sim_token(context)

    def sim_last_token(self, context: SimContext) -> SimEvent | None:
        """``generated_text`` is the whole answer where the simulator gives the dialect its
        text (``SimContext.answer_text``: ``apis`` does not import its vocabulary)."""
        text = context.answer_text() if context.answer_text is not None else ""
        if context.reasoning_tokens and context.reasoning_text is not None:
            text = f"{THINK_OPEN}{context.reasoning_text()}{THINK_CLOSE}{text}"
        details = None
        if context.ask.include_usage:
            details = {
                "finish_reason": _FINISH.get(context.finish_reason, "length"),
                "generated_tokens": context.completion_tokens,
                "seed": None,
                "input_length": context.ask.prompt_tokens,
            }
        return None, _event(TEXT, text, details)


class TGIStream(TextGenerationInference):
    """One stream's reader: whether its text is inside ``<think>`` tags."""

    def __init__(self) -> None:
        self._thinking = InlineThinking()

    def read(self, event: dict[str, object], name: str | None) -> EventReading:
        details = event.get("details")
        details = details if isinstance(details, dict) else None
        reading = EventReading(
            completion=token_count(details, "generated_tokens", "details"),
            prompt=token_count(details, "input_length", "details"),
        )
        if details is not None:
            reading.finish_reason = finish_words(details.get("finish_reason"))
        reading.done = details is not None or isinstance(event.get("generated_text"), str)
        token = event.get("token")
        if isinstance(token, dict):
            reading.tokens = True
            reading.count, reading.count_source = 1, "token"
            text = "" if token.get("special") is True else text_of(token.get("text"))
            reading.reasoning, reading.text = self._thinking.split(text)
        return reading


def _event(
    text: str, generated_text: str | None, details: dict[str, object] | None
) -> dict[str, object]:
    """A ``StreamResponse`` as TGI serializes it (``top_tokens`` left out when empty)."""
    token = {"id": SEQUENCE, "text": text, "logprob": LOGPROB, "special": False}
    return {
        "index": COMPLETION,
        "token": token,
        "generated_text": generated_text,
        "details": details,
    }


def _max_new_tokens(params: dict[str, object], default: int) -> int:
    value = params.get("max_new_tokens")
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**32:
        raise BadAsk(_rejection("parameters.max_new_tokens", "expected u32"), VALIDATION)
    if value > MAX_INT_FIELD:  # a u32 still, but no request: only a hang
        raise BadAsk(f"`max_new_tokens` must be at most {MAX_INT_FIELD}", VALIDATION)
    if value == 0:
        raise BadAsk("`max_new_tokens` must be strictly positive", VALIDATION)
    return value


def _rejection(field: str, expected: str) -> str:
    """The start of axum's message for a body that does not deserialize."""
    return f"Failed to deserialize the JSON body into the target type: {field}: {expected}"


DIALECT = TextGenerationInference()
