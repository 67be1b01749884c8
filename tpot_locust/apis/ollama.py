"""Ollama's chat API (``/api/chat``), streamed as newline-delimited JSON.

Source: ollama/ollama ``api/types.go`` (``ChatRequest``, ``ChatResponse``, ``Message``,
``Metrics``, ``ListResponse``) and ``server/routes.go`` (``ChatHandler``,
``streamResponse``); Ollama's API docs, "Generate a chat completion". A request is
``{"model", "messages", "stream": true, "options": {"num_predict": N}}``; Ollama has no
``ignore_eos`` nor minimum length, so a stream may end early at the model's EOS. Each line
is ``{"model", "created_at", "message": {"role": "assistant", "content": ...}, "done":
false}``, with the reasoning of a thinking model in ``message.thinking``; the last line has
``"done": true``, ``done_reason`` ("stop", "length") and the counts ``prompt_eval_count``
and ``eval_count`` (Go's ``omitempty``: a count of 0 is left out) beside durations in ns.
A failure is a line ``{"error": ...}`` (the shared error rule). The models list is
``GET /api/tags``: ``{"models": [{"name", "model", ...}]}``.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from typing import Any, ClassVar

from tpot_locust.apis.dialect import (
    MAX_INT_FIELD,
    TEXT,
    BadAsk,
    BodyOptions,
    CountText,
    Dialect,
    EventReading,
    FastPath,
    Framing,
    SimAsk,
    SimContext,
    SimEvent,
    checked_model,
    finish_words,
    object_field,
    text_of,
    token_count,
)
from tpot_locust.apis.prompt_counts import count_chat_prompt

# Anything but a plain answer line: thinking, tool calls, images, logprobs, an error.
_NOT_PLAIN = re.compile(rb'"(?:thinking|tool_calls|images|logprobs|error)":')
_LATEST = ":latest"  # Ollama's default tag: "m" and "m:latest" name the same model


class OllamaChat(Dialect):
    name: ClassVar[str] = "ollama"
    path: ClassVar[str] = "/api/chat"
    framing: ClassVar[Framing] = "ndjson"
    media_types: ClassVar[tuple[str, ...]] = ("application/x-ndjson",)
    models_path: ClassVar[str | None] = "/api/tags"
    fast: ClassVar[FastPath | None] = FastPath(b'"content":"', b'"done":false', _NOT_PLAIN)
    serves_whole: ClassVar[bool] = True
    templated: ClassVar[bool] = True  # Ollama renders the model's template around messages
    sim_reasoning: ClassVar[bool] = True  # a thinking model's message.thinking

    def body(self, history: list[dict[str, str]], options: BodyOptions) -> dict[str, object]:
        """``options.ignore_eos`` and ``force_min_tokens`` have no Ollama option; usage
        comes on the last line unasked."""
        return {
            "model": options.model,
            "messages": history,
            "stream": True,
            "options": {"num_predict": options.max_tokens},
        }

    def first_model(self, body: bytes) -> str:
        """The first model of ``/api/tags``: ``models[0].name``."""
        try:
            card = json.loads(body)["models"][0]
            model = card.get("name") or card.get("model")
        except (ValueError, KeyError, IndexError, TypeError, AttributeError, RecursionError):
            model = None
        return checked_model(model, body, self.models_path)

    def read(self, event: dict[str, object], name: str | None) -> EventReading:
        reading = EventReading()
        message = event.get("message")
        if isinstance(message, dict):
            content, thinking = message.get("content"), message.get("thinking")
            answer = bool(content) or bool(message.get("tool_calls"))
            reading.tokens = answer or bool(thinking)
            reading.reasoning = not answer and bool(thinking)
            reading.text = text_of(content)
        if event.get("done") is True:
            reading.done = True
            # Ollama before 0.1.38 (May 2024) sent no done_reason: "done" is its only word
            reading.finish_reason = finish_words(event.get("done_reason")) or "done"
            reading.completion = token_count(event, "eval_count", "response")
            reading.prompt = token_count(event, "prompt_eval_count", "response")
        return reading

    # -- simulator side ----------------------------------------------------------------------

    def sim_ask(self, data: dict[str, object], count: CountText, default_max_tokens: int) -> SimAsk:
        """``num_predict`` -1 (no limit), -2 (fill the context) and 0 ask the simulator's
        default; ``stream`` is true unless set false."""
        model = data.get("model")
        if not isinstance(model, str) or not model:
            raise BadAsk("model is required")
        stream = data.get("stream", True)
        if stream is not None and not isinstance(stream, bool):
            raise BadAsk(_unmarshal("stream", "bool", stream))
        options = object_field(data, "options")
        return SimAsk(
            prompt_tokens=count_chat_prompt(data.get("messages"), count),
            max_tokens=_num_predict(options, default_max_tokens),
            stream=stream is not False,
            model=model.removesuffix(_LATEST),
        )

    def sim_token(self, context: SimContext) -> SimEvent:
        return None, self._line(context, TEXT)

    def sim_reasoning_token(self, context: SimContext) -> SimEvent:
        """Ollama's thinking line (``think`` on): empty content, the text in ``thinking``."""
        line = self._line(context, "")
        line["message"]["thinking"] = TEXT
        return None, line

    def sim_closing(self, context: SimContext) -> list[SimEvent]:
        """The last line, without durations: rendered before the stream is timed (Go leaves
        zero durations out too)."""
        return [(None, self._last(context, ""))]

    def sim_whole(self, context: SimContext, text: str) -> dict[str, object] | None:
        whole = self._last(context, text)
        if context.reasoning_tokens and context.reasoning_text is not None:
            whole["message"]["thinking"] = context.reasoning_text()
        return whole

    def sim_models(
        self, model: str, created: int, adapters: tuple[str, ...] = ()
    ) -> dict[str, object]:
        cards = []
        for name in (model, *adapters):
            details = {
                "parent_model": "" if name == model else model,
                "format": "gguf",
                "family": "tpot-sim",
                "families": ["tpot-sim"],
                "parameter_size": "",
                "quantization_level": "",
            }
            cards.append(
                {
                    "name": name,
                    "model": name,
                    "modified_at": _created_at(created),
                    "size": 0,
                    "digest": hashlib.sha256(name.encode()).hexdigest(),
                    "details": details,
                }
            )
        return {"models": cards}

    def _line(self, context: SimContext, text: str, done: bool = False) -> dict[str, Any]:
        return {
            "model": context.model,
            "created_at": _created_at(context.created),
            "message": {"role": "assistant", "content": text},
            "done": done,
        }

    def _last(self, context: SimContext, text: str) -> dict[str, Any]:
        line = self._line(context, text, done=True)
        line["done_reason"] = context.finish_reason  # "stop" / "length": Ollama's words too
        if context.ask.prompt_tokens:
            line["prompt_eval_count"] = context.ask.prompt_tokens
        if context.completion_tokens:
            line["eval_count"] = context.completion_tokens
        return line


def _num_predict(options: dict[str, object], default: int) -> int:
    value = options.get("num_predict")
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
        raise BadAsk('option "num_predict" must be of type integer')
    if value > MAX_INT_FIELD:
        raise BadAsk(f"'num_predict' must be at most {MAX_INT_FIELD}")
    return int(value) if value >= 1 else default  # Go truncates a JSON number to int


def _unmarshal(field: str, kind: str, value: object) -> str:
    """Go's message for a field of the wrong JSON type."""
    kinds: dict[type, str] = {str: "string", list: "array", dict: "object"}
    got = kinds.get(type(value), "number")
    return f"json: cannot unmarshal {got} into Go struct field ChatRequest.{field} of type {kind}"


def _created_at(created: int) -> str:
    """Go's RFC 3339 time (its zero nanoseconds left out), in UTC."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(created))


DIALECT = OllamaChat()
