"""OpenAI's Responses API (``/v1/responses``), as vLLM streams it.

Documented in the OpenAI API reference, "Streaming events" for Responses; vLLM's own
version is ``vllm/entrypoints/openai/responses/serving.py`` and ``streaming_events.py``.
Every event is an SSE event named by ``event:`` whose JSON repeats the name in ``type``
and counts itself in ``sequence_number``. A stream opens with ``response.created`` and
``response.in_progress`` (the response object, no usage yet), then an output item and its
content part are added; answer text comes in ``response.output_text.delta`` (``delta``;
``logprobs``: one entry per token when asked for), reasoning in
``response.reasoning_text.delta`` (vLLM, transformers) or
``response.reasoning_summary_text.delta`` (OpenAI's summaries), tool-call arguments in
``response.function_call_arguments.delta``; then the ``.done`` events repeat the whole
text, and the stream ends with the response object, its usage and status, in
``response.completed``, ``response.incomplete`` (OpenAI: the reason in
``incomplete_details.reason``, e.g. ``max_output_tokens``) or ``response.failed``
(``response.error``). vLLM ends a max-length answer with ``response.completed`` whose
response has ``status: "incomplete"`` and ``incomplete_details.reason:
"max_output_tokens"``; both are read alike. No ``[DONE]`` follows. Errors mid-stream come
as an ``error`` event (``apis.errors``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, ClassVar

from tpot_locust.apis.dialect import (
    SEQUENCE,
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
    details,
    finish_words,
    int_field,
    list_length,
    nested,
    text_of,
    token_count,
)
from tpot_locust.apis.errors import error_message
from tpot_locust.apis.prompt_counts import count_chat_prompt

TEXT_DELTA = "response.output_text.delta"
# Deltas of answer tokens other than text (no answer text of ours): a refusal's text
# is answer text too.
_ANSWER_DELTAS = frozenset(
    {
        "response.function_call_arguments.delta",
        "response.custom_tool_call_input.delta",
        "response.mcp_call_arguments.delta",
        "response.code_interpreter_call_code.delta",
    }
)
_REASONING_DELTAS = frozenset(
    {"response.reasoning_text.delta", "response.reasoning_summary_text.delta"}
)
# The events that end a stream, with the response object in ``response``.
_TERMINAL = frozenset(
    {"response.completed", "response.incomplete", "response.failed", "response.cancelled"}
)
# A text delta that needs a full decode: logprob entries (token counts) or an error.
_NOT_PLAIN = re.compile(rb'"logprobs":\[(?!\])|"error":(?!null)')
_OPENING_EVENTS = 4  # created, in_progress, output_item.added, content_part.added
REASONING_DELTA = "response.reasoning_text.delta"
# between reasoning and answer: reasoning_text.done, reasoning_part.done, output_item.done,
# then the message's output_item.added and content_part.added
_REASONING_END_EVENTS = 5


class Responses(Dialect):
    name: ClassVar[str] = "responses"
    path: ClassVar[str] = "/v1/responses"
    fast: ClassVar[FastPath | None] = FastPath(
        b'"delta":"', b'"type":"response.output_text.delta"', _NOT_PLAIN
    )
    sim_id_prefix: ClassVar[str] = "resp_"
    serves_whole: ClassVar[bool] = True
    templated: ClassVar[bool] = True  # vLLM renders the chat template around the input
    sim_reasoning: ClassVar[bool] = True  # a reasoning item first, as vLLM streams it

    # -- client side -------------------------------------------------------------------------

    def body(self, history: list[dict[str, str]], options: BodyOptions) -> dict[str, object]:
        """The conversation as ``input`` messages; usage always comes with the last event,
        and vLLM's ``ResponsesRequest`` has ``ignore_eos`` but no ``min_tokens`` (nothing
        else asks for an exact length). ``store: false``: a load test's answers are not to
        be kept (OpenAI keeps them by default; vLLM would, with its store enabled)."""
        body: dict[str, object] = {"model": options.model, "input": history, "stream": True}
        body.update(max_output_tokens=options.max_tokens, store=False)
        if options.ignore_eos:
            body["ignore_eos"] = True
        return body

    def read(self, event: dict[str, object], name: str | None) -> EventReading:
        kind = event.get("type")
        if not isinstance(kind, str):
            kind = name  # the JSON names its event; the SSE name only where it does not
        if kind == TEXT_DELTA or kind == "response.refusal.delta":
            return _text_delta(event)
        if kind in _REASONING_DELTAS:
            return EventReading(tokens=bool(text_of(event.get("delta"))), reasoning=True)
        if kind in _ANSWER_DELTAS:
            return EventReading(tokens=bool(text_of(event.get("delta"))))
        if kind in _TERMINAL:
            return _terminal(kind, event.get("response"))
        return EventReading()  # lifecycle events: created, in_progress, *.added, *.done

    # -- simulator side ----------------------------------------------------------------------

    def sim_ask(self, data: dict[str, Any], count: CountText, default_max_tokens: int) -> SimAsk:
        """vLLM's ``ResponsesRequest``: ``input`` a text or a list of items (messages
        counted by their content), ``instructions`` a system text, ``max_output_tokens``
        (vLLM's default when left out), ``ignore_eos``; no ``min_tokens``."""
        prompt = _input_tokens(data.get("input"), count)
        instructions = data.get("instructions")
        if instructions is not None and not isinstance(instructions, str):
            raise BadAsk("'instructions' must be a string")
        if instructions:
            prompt += count(instructions)
        return SimAsk(
            prompt_tokens=prompt,
            max_tokens=int_field(data, "max_output_tokens", default_max_tokens, 1),
            ignore_eos=bool_field(data, "ignore_eos"),
            stream=bool_field(data, "stream"),
            include_usage=True,  # always, in the last event
            model=data.get("model"),
        )

    def sim_opening(self, context: SimContext) -> list[SimEvent]:
        """created and in_progress (the response object in progress), then the message
        item and its text part, as vLLM sends them; with reasoning, its reasoning item and
        part instead (the message's come after the reasoning: ``sim_reasoning_end``)."""
        response = _response(context, "in_progress", [], None)
        head = [
            _event("response.created", {"response": response}, 0),
            _event("response.in_progress", {"response": response}, 1),
        ]
        if context.reasoning_tokens:
            item = {**_reasoning_item(context, []), "status": "in_progress"}
            part = {"text": "", "type": "reasoning_text"}
            return [
                *head,
                _event("response.output_item.added", {"item": item, "output_index": 0}, 2),
                _event(
                    "response.reasoning_part.added",
                    {
                        "content_index": 0,
                        "item_id": _reasoning_id(context),
                        "output_index": 0,
                        "part": part,
                    },
                    3,
                ),
            ]
        return [*head, *_message_opening(context, 0, 2)]

    def sim_token(self, context: SimContext) -> SimEvent:
        return TEXT_DELTA, {
            "content_index": 0,
            "delta": TEXT,
            "item_id": _item_id(context),
            "logprobs": [],
            "output_index": _message_index(context),
            "sequence_number": SEQUENCE,
            "type": TEXT_DELTA,
        }

    def sim_reasoning_token(self, context: SimContext) -> SimEvent:
        return REASONING_DELTA, {
            "content_index": 0,
            "delta": TEXT,
            "item_id": _reasoning_id(context),
            "output_index": 0,
            "sequence_number": SEQUENCE,
            "type": REASONING_DELTA,
        }

    def sim_reasoning_end(self, context: SimContext) -> list[SimEvent]:
        """The reasoning's ``.done`` events (its whole text), then the message item and its
        text part opened."""
        sequence = _OPENING_EVENTS + context.reasoning_tokens
        text = context.reasoning_text() if context.reasoning_text is not None else ""
        item_id = _reasoning_id(context)
        part: dict[str, object] = {"text": text, "type": "reasoning_text"}
        return [
            _event(
                "response.reasoning_text.done",
                {"content_index": 0, "item_id": item_id, "output_index": 0, "text": text},
                sequence,
            ),
            _event(
                "response.reasoning_part.done",
                {"content_index": 0, "item_id": item_id, "output_index": 0, "part": part},
                sequence + 1,
            ),
            _event(
                "response.output_item.done",
                {"item": _reasoning_item(context, [part]), "output_index": 0},
                sequence + 2,
            ),
            *_message_opening(context, 1, sequence + 3),
        ]

    def sim_closing(self, context: SimContext) -> list[SimEvent]:
        """The ``.done`` events, then ``response.completed`` with the usage: ``status``
        ``incomplete`` (reason ``max_output_tokens``) for a max-length answer, as vLLM
        sends it. The ``.done`` events repeat the whole text, as the real server's do."""
        sequence = _OPENING_EVENTS + context.completion_tokens
        if context.reasoning_tokens:
            sequence += _REASONING_END_EVENTS
        item_id = _item_id(context)
        index = _message_index(context)
        text = context.answer_text() if context.answer_text is not None else ""
        part: dict[str, object] = {
            "annotations": [],
            "text": text,
            "type": "output_text",
            "logprobs": None,
        }
        item = _message_item(context, [part])
        status = "incomplete" if context.finish_reason == "length" else "completed"
        response = _response(context, status, [*_reasoning_output(context), item], _usage(context))
        return [
            _event(
                "response.output_text.done",
                {
                    "content_index": 0,
                    "item_id": item_id,
                    "logprobs": [],
                    "output_index": index,
                    "text": text,
                },
                sequence,
            ),
            _event(
                "response.content_part.done",
                {"content_index": 0, "item_id": item_id, "output_index": index, "part": part},
                sequence + 1,
            ),
            _event(
                "response.output_item.done", {"item": item, "output_index": index}, sequence + 2
            ),
            _event("response.completed", {"response": response}, sequence + 3),
        ]

    def sim_whole(self, context: SimContext, text: str) -> dict[str, object] | None:
        part: dict[str, object] = {
            "annotations": [],
            "text": text,
            "type": "output_text",
            "logprobs": None,
        }
        status = "incomplete" if context.finish_reason == "length" else "completed"
        output = [*_reasoning_output(context), _message_item(context, [part])]
        return _response(context, status, output, _usage(context))


def _text_delta(event: dict[str, object]) -> EventReading:
    """An answer text delta; its logprob entries, when there are some, count its tokens."""
    text = text_of(event.get("delta"))
    reading = EventReading(tokens=bool(text), text=text)
    if text and (entries := list_length(event.get("logprobs"))) is not None:
        reading.count, reading.count_source = entries, "logprobs"
    return reading


def _terminal(kind: str, response: object) -> EventReading:
    """The last event's response object: usage, and why it ended (or how it failed). The
    event's kind says it where the object's ``status`` does not."""
    if not isinstance(response, dict):
        return EventReading(done=True, error=f"{kind} carries no response object")
    status = response.get("status") or kind.removeprefix("response.")
    if status == "failed":
        return EventReading(done=True, error=error_message(response.get("error") or "failed"))
    if status == "cancelled":
        return EventReading(done=True, error="the response was cancelled")
    usage = response.get("usage")
    reading = EventReading(
        done=True,
        completion=token_count(usage, "output_tokens"),
        prompt=token_count(usage, "input_tokens"),
        cached=token_count(details(usage, "input_tokens_details"), "cached_tokens"),
        reasoning_reported=token_count(details(usage, "output_tokens_details"), "reasoning_tokens"),
    )
    if status == "incomplete":  # OpenAI's response.incomplete; vLLM's completed, incomplete
        reason = nested(response, "incomplete_details", "reason")
        reading.finish_reason = finish_words(reason) or "incomplete"
    else:
        reading.finish_reason = finish_words(status)
    return reading


def _input_tokens(value: object, count: CountText) -> int:
    """``input`` as vLLM takes it: a text, or a list of items (messages, by content)."""
    if isinstance(value, str):
        return count(value)
    if value is None:
        raise BadAsk("'input' is a required field")
    return count_chat_prompt(value, count, key="input")


def _event(kind: str, fields: dict[str, object], sequence: int) -> SimEvent:
    """An event as vLLM writes it: named, its fields, then ``sequence_number`` and
    ``type`` (pydantic's alphabetical-by-model order)."""
    return kind, {**fields, "sequence_number": sequence, "type": kind}


def _item_id(context: SimContext) -> str:
    return "msg_" + context.response_id.removeprefix("resp_")[:16]


def _reasoning_id(context: SimContext) -> str:
    return "rs_" + context.response_id.removeprefix("resp_")[:16]


def _message_index(context: SimContext) -> int:
    """The message's ``output_index``: after the reasoning item, where there is one."""
    return 1 if context.reasoning_tokens else 0


def _message_opening(context: SimContext, index: int, sequence: int) -> list[SimEvent]:
    """The message item and its text part added, in progress."""
    item = {**_message_item(context, []), "status": "in_progress"}
    part = {"annotations": [], "text": "", "type": "output_text", "logprobs": []}
    return [
        _event("response.output_item.added", {"item": item, "output_index": index}, sequence),
        _event(
            "response.content_part.added",
            {"content_index": 0, "item_id": _item_id(context), "output_index": index, "part": part},
            sequence + 1,
        ),
    ]


def _reasoning_item(context: SimContext, content: list[dict[str, object]]) -> dict[str, object]:
    """vLLM's reasoning item: its text in ``content`` (``reasoning_text`` parts)."""
    return {
        "id": _reasoning_id(context),
        "summary": [],
        "type": "reasoning",
        "content": content,
        "encrypted_content": None,
        "status": "completed",
    }


def _reasoning_output(context: SimContext) -> list[dict[str, object]]:
    """The reasoning item of a finished response (none without reasoning)."""
    if not context.reasoning_tokens:
        return []
    text = context.reasoning_text() if context.reasoning_text is not None else ""
    return [_reasoning_item(context, [{"text": text, "type": "reasoning_text"}])]


def _message_item(context: SimContext, content: list[dict[str, object]]) -> dict[str, object]:
    return {
        "id": _item_id(context),
        "content": content,
        "role": "assistant",
        "status": "completed",
        "type": "message",
    }


def _usage(context: SimContext) -> dict[str, object]:
    prompt, completion = context.ask.prompt_tokens, context.completion_tokens
    cached = context.cached_tokens or 0
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": cached},
        "output_tokens": completion,
        "output_tokens_details": {"reasoning_tokens": context.reasoning_tokens},
        "total_tokens": prompt + completion,
    }


def _response(
    context: SimContext, status: str, output: Sequence[object], usage: dict[str, object] | None
) -> dict[str, object]:
    """The response object, with vLLM's fields in its order."""
    incomplete = {"reason": "max_output_tokens"} if status == "incomplete" else None
    return {
        "id": context.response_id,
        "created_at": context.created,
        "incomplete_details": incomplete,
        "instructions": None,
        "metadata": None,
        "model": context.model,
        "object": "response",
        "output": output,
        "parallel_tool_calls": True,
        "temperature": 1.0,
        "tool_choice": "none",
        "tools": [],
        "top_p": 1.0,
        "background": False,
        "max_output_tokens": context.ask.max_tokens,
        "max_tool_calls": None,
        "previous_response_id": None,
        "prompt": None,
        "reasoning": None,
        "service_tier": "auto",
        "status": status,
        "text": None,
        "top_logprobs": None,
        "truncation": "disabled",
        "usage": usage,
        "user": None,
    }


DIALECT = Responses()
