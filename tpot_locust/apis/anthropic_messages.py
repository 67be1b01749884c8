"""Anthropic's Messages API (``/v1/messages``), as Anthropic and vLLM stream it.

Documented in Anthropic's API reference, "Streaming Messages"; vLLM serves it too
(``vllm/entrypoints/anthropic/serving.py``). Every event is an SSE event named by
``event:`` whose JSON repeats the name in ``type``: ``message_start`` (the message, its
``usage.input_tokens`` and cache counts; its ``output_tokens`` is a starting value, not
tokens streamed), then per content block ``content_block_start``, ``content_block_delta``
(``delta.type``: ``text_delta`` text, ``thinking_delta`` reasoning, ``input_json_delta`` a
tool call's arguments, ``signature_delta`` a thinking block's signature: no token) and
``content_block_stop``; ``ping`` keep-alives anywhere; ``message_delta`` with
``delta.stop_reason`` (``end_turn``, ``max_tokens``, ``stop_sequence``, ``tool_use``) and
the cumulative ``usage.output_tokens``; ``message_stop`` last. Errors come as
``{"type": "error", "error": {"type": "overloaded_error", "message": ...}}``
(``apis.errors``). Requests name the version in ``anthropic-version`` and the key in
``x-api-key``; the models list is ``{"data": [{"id", "type": "model", ...}], ...}``.
"""

from __future__ import annotations

import re
from datetime import datetime, timezone
from typing import Any, ClassVar

from tpot_locust.apis.dialect import (
    TEXT,
    BadAsk,
    BodyOptions,
    CountText,
    Dialect,
    EventReading,
    FastPath,
    SimAsk,
    SimContext,
    SimEvent,
    bool_field,
    finish_words,
    int_field,
    nested,
    text_of,
    token_count,
)
from tpot_locust.apis.prompt_counts import count_chat_prompt

API_VERSION = "2023-06-01"
STOP_REASONS = {"length": "max_tokens", "stop": "end_turn"}  # the simulator's -> Anthropic's
SIGNATURE = "tpot-sim"  # the simulator's thinking blocks' signature (opaque to clients)
# A text delta is plain unless it carries anything else (an error, usage, other deltas).
_NOT_PLAIN = re.compile(rb'"(?:error|usage|thinking|partial_json|signature)":')


class Messages(Dialect):
    name: ClassVar[str] = "messages"
    path: ClassVar[str] = "/v1/messages"
    fast: ClassVar[FastPath | None] = FastPath(b'"text":"', b'"type":"text_delta"', _NOT_PLAIN)
    sim_id_prefix: ClassVar[str] = "msg_"
    serves_whole: ClassVar[bool] = True
    templated: ClassVar[bool] = True  # the server renders its chat template around messages
    sim_reasoning: ClassVar[bool] = True  # a thinking block first (extended thinking)

    # -- client side -------------------------------------------------------------------------

    def body(self, history: list[dict[str, str]], options: BodyOptions) -> dict[str, object]:
        """Anthropic's request: system messages go in ``system``. Nothing asks for an
        exact length: the API has no ``ignore_eos``/``min_tokens`` (Anthropic refuses
        unknown fields, vLLM drops them), and usage always comes."""
        system = [message["content"] for message in history if message.get("role") == "system"]
        messages = [message for message in history if message.get("role") != "system"]
        body: dict[str, object] = {
            "model": options.model,
            "max_tokens": options.max_tokens,
            "messages": messages,
            "stream": True,
        }
        if system:
            body["system"] = "\n\n".join(system)
        return body

    def headers(self, api_key: str | None) -> dict[str, str]:
        """The version header always; the key as ``x-api-key`` (Anthropic's), not a bearer
        token."""
        headers = {"anthropic-version": API_VERSION}
        if api_key:
            headers["x-api-key"] = api_key
        return headers

    def read(self, event: dict[str, object], name: str | None) -> EventReading:
        kind = event.get("type")
        if not isinstance(kind, str):
            kind = name  # the JSON names its event; the SSE name only where it does not
        if kind == "content_block_delta":
            return _delta(event.get("delta"))
        if kind == "content_block_start":
            return _block_start(event.get("content_block"))
        if kind == "message_delta":
            usage = event.get("usage")
            reading = _usage_reading(usage, "usage")
            if not (isinstance(usage, dict) and _CACHE_FIELDS <= usage.keys()):
                # the SDK types the delta's prompt counts optional: without the cache
                # counts beside it, input_tokens alone is no prompt (message_start's is)
                reading.prompt = reading.cached = None
            reading.completion = token_count(usage, "output_tokens")
            reading.finish_reason = finish_words(nested(event, "delta", "stop_reason"))
            return reading
        if kind == "message_start":
            # its output_tokens (0 or 1) counts nothing streamed yet: left out, so that
            # it is never taken for the completion count of a stream cut short
            return _usage_reading(nested(event, "message", "usage"), "message.usage")
        if kind == "message_stop":
            return EventReading(done=True)
        return EventReading()  # ping, content_block_stop, unknown events

    # -- simulator side ----------------------------------------------------------------------

    def sim_ask(self, data: dict[str, Any], count: CountText, default_max_tokens: int) -> SimAsk:
        """``model`` and ``max_tokens`` are required (no default); ``messages`` by their
        content, plus ``system``. The API has no ``ignore_eos``: the answer may end early."""
        for required in ("model", "max_tokens"):
            if data.get(required) is None:
                raise BadAsk(f"{required}: Field required")
        prompt = count_chat_prompt(data.get("messages"), count) + _system_tokens(
            data.get("system"), count
        )
        return SimAsk(
            prompt_tokens=prompt,
            max_tokens=int_field(data, "max_tokens", default_max_tokens, 1),
            stream=bool_field(data, "stream"),
            include_usage=True,
            model=data["model"],
        )

    def sim_opening(self, context: SimContext) -> list[SimEvent]:
        """``message_start`` (usage as Anthropic sends it: ``output_tokens`` 1), the text
        block's start and a ping, in Anthropic's field order."""
        cached = context.cached_tokens or 0  # Anthropic's input_tokens leaves it out
        usage = {
            "input_tokens": context.ask.prompt_tokens - cached,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": cached,
            "output_tokens": 1,
        }
        message: dict[str, object] = {
            "id": context.response_id,
            "type": "message",
            "role": "assistant",
            "model": context.model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": usage,
        }
        first: dict[str, object] = {"type": "text", "text": ""}
        if context.reasoning_tokens:  # a thinking block before the text block
            first = {"type": "thinking", "thinking": "", "signature": ""}
        block = {"type": "content_block_start", "index": 0, "content_block": first}
        return [
            ("message_start", {"type": "message_start", "message": message}),
            ("content_block_start", block),
            ("ping", {"type": "ping"}),
        ]

    def sim_token(self, context: SimContext) -> SimEvent:
        return "content_block_delta", {
            "type": "content_block_delta",
            "index": _text_index(context),
            "delta": {"type": "text_delta", "text": TEXT},
        }

    def sim_reasoning_token(self, context: SimContext) -> SimEvent:
        return "content_block_delta", {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "thinking_delta", "thinking": TEXT},
        }

    def sim_reasoning_end(self, context: SimContext) -> list[SimEvent]:
        """The thinking block's signature and stop, then the text block's start."""
        signature = {"type": "signature_delta", "signature": SIGNATURE}
        text_block = {
            "type": "content_block_start",
            "index": 1,
            "content_block": {"type": "text", "text": ""},
        }
        return [
            (
                "content_block_delta",
                {"type": "content_block_delta", "index": 0, "delta": signature},
            ),
            ("content_block_stop", {"type": "content_block_stop", "index": 0}),
            ("content_block_start", text_block),
        ]

    def sim_closing(self, context: SimContext) -> list[SimEvent]:
        delta = {"stop_reason": _stop_reason(context), "stop_sequence": None}
        return [
            ("content_block_stop", {"type": "content_block_stop", "index": _text_index(context)}),
            (
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": delta,
                    "usage": {"output_tokens": context.completion_tokens},
                },
            ),
            ("message_stop", {"type": "message_stop"}),
        ]

    def sim_whole(self, context: SimContext, text: str) -> dict[str, object] | None:
        usage = {
            "input_tokens": context.ask.prompt_tokens,
            "output_tokens": context.completion_tokens,
        }
        content: list[dict[str, object]] = [{"type": "text", "text": text}]
        if context.reasoning_tokens and context.reasoning_text is not None:
            thinking: dict[str, object] = {
                "type": "thinking",
                "thinking": context.reasoning_text(),
                "signature": SIGNATURE,
            }
            content.insert(0, thinking)
        return {
            "id": context.response_id,
            "type": "message",
            "role": "assistant",
            "model": context.model,
            "content": content,
            "stop_reason": _stop_reason(context),
            "stop_sequence": None,
            "usage": usage,
        }

    def sim_models(
        self, model: str, created: int, adapters: tuple[str, ...] = ()
    ) -> dict[str, object]:
        """Anthropic's models list (the client reads ``data[0].id`` in either shape)."""
        when = datetime.fromtimestamp(created, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        names = (model, *adapters)
        cards = [
            {"type": "model", "id": name, "display_name": name, "created_at": when}
            for name in names
        ]
        return {"data": cards, "has_more": False, "first_id": model, "last_id": names[-1]}


def _delta(delta: object) -> EventReading:
    """A content block's delta: text, thinking (reasoning) or a tool call's JSON."""
    if not isinstance(delta, dict):
        return EventReading()
    kind = delta.get("type")
    if kind == "text_delta":
        text = text_of(delta.get("text"))
        return EventReading(tokens=bool(text), text=text)
    if kind == "thinking_delta":
        return EventReading(tokens=bool(text_of(delta.get("thinking"))), reasoning=True)
    if kind == "input_json_delta":
        return EventReading(tokens=bool(text_of(delta.get("partial_json"))))
    return EventReading()  # signature_delta, citations_delta: no generated token


def _block_start(block: object) -> EventReading:
    """A block's start: empty as Anthropic and vLLM send it; text in it is a token."""
    if not isinstance(block, dict):
        return EventReading()
    if block.get("type") == "text" and (text := text_of(block.get("text"))):
        return EventReading(tokens=True, text=text)
    if block.get("type") == "thinking" and text_of(block.get("thinking")):
        return EventReading(tokens=True, reasoning=True)
    return EventReading()


_CACHE_FIELDS = {"cache_read_input_tokens", "cache_creation_input_tokens"}


def _usage_reading(usage: object, where: str) -> EventReading:
    """Prompt counts: Anthropic's ``input_tokens`` leaves out the prompt tokens read from
    or written to the cache, so the prompt is the sum of the three."""
    fresh = token_count(usage, "input_tokens", where)
    read = token_count(usage, "cache_read_input_tokens", where)
    written = token_count(usage, "cache_creation_input_tokens", where)
    prompt = None if fresh is None else fresh + (read or 0) + (written or 0)
    return EventReading(prompt=prompt, cached=read)


def _system_tokens(system: object, count: CountText) -> int:
    """``system``: a text, or text blocks."""
    if system is None:
        return 0
    if isinstance(system, str):
        return count(system)
    if isinstance(system, list):
        return sum(
            count(block["text"])
            for block in system
            if isinstance(block, dict) and isinstance(block.get("text"), str)
        )
    raise BadAsk("system: Input should be a valid string or a list of text blocks")


def _text_index(context: SimContext) -> int:
    """The text block's index: after the thinking block, where there is one."""
    return 1 if context.reasoning_tokens else 0


def _stop_reason(context: SimContext) -> str:
    return STOP_REASONS.get(context.finish_reason, context.finish_reason)


DIALECT = Messages()
