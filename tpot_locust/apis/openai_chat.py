"""OpenAI's Chat Completions API (``/v1/chat/completions``), as vLLM and SGLang stream it.

The worked example of a dialect: ``data:`` events of ``chat.completion.chunk`` objects,
text in ``choices[0].delta.content``, a finish reason on the last choice, usage when
``stream_options.include_usage`` asks for it, and ``data: [DONE]`` at the end. Shared
with the legacy Completions API (``openai_completions``), which differs in a few fields.
"""

from __future__ import annotations

import re
from typing import Any, ClassVar

from tpot_locust.apis.dialect import (
    COMPLETION,
    TEXT,
    TOTAL,
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
    object_field,
    text_of,
    token_count,
)
from tpot_locust.apis.prompt_counts import count_chat_prompt

DONE = b"[DONE]"
# Anything but a plain token event: usage, an error, a tool call, reasoning, a refusal,
# token ids or logprobs (null values are plain: OpenAI sends ``"usage":null`` on every chunk).
_NOT_PLAIN = re.compile(
    rb'"(?:usage|error|tool_calls|reasoning|reasoning_content|refusal|token_ids|logprobs)"'
    rb":(?!null)"
)


class OpenAIStream(Dialect):
    """What Chat Completions and Completions share."""

    done_marker: ClassVar[bytes | None] = DONE
    serves_whole: ClassVar[bool] = True
    chunk_object: ClassVar[str]
    whole_object: ClassVar[str]

    def body(self, history: list[dict[str, str]], options: BodyOptions) -> dict[str, object]:
        body: dict[str, object] = {"model": options.model, "stream": True}
        body.update(self.prompt_fields(history))
        body["max_tokens"] = options.max_tokens
        if options.ignore_eos:
            body["ignore_eos"] = True
        if options.force_min_tokens:
            body["min_tokens"] = options.max_tokens
        if options.include_usage:
            body["stream_options"] = {"include_usage": True}
        return body

    def prompt_fields(self, history: list[dict[str, str]]) -> dict[str, object]:
        raise NotImplementedError

    def read(self, event: dict[str, object], name: str | None) -> EventReading:
        usage = event.get("usage")
        reading = EventReading(
            completion=token_count(usage, "completion_tokens"),
            prompt=token_count(usage, "prompt_tokens"),
            cached=token_count(details(usage, "prompt_tokens_details"), "cached_tokens"),
            reasoning_reported=token_count(
                details(usage, "completion_tokens_details"), "reasoning_tokens"
            ),
        )
        choices = event.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            return reading
        choice = choices[0]
        if choice.get("index", 0) != 0:  # another choice's stream (n > 1): not ours
            return reading
        self.read_choice(choice, reading)
        reading.finish_reason = finish_words(choice.get("finish_reason"))
        if reading.tokens:
            if (ids := list_length(choice.get("token_ids"))) is not None:
                reading.count, reading.count_source = ids, "token_ids"
            elif (entries := self.logprob_entries(choice)) is not None:
                reading.count, reading.count_source = entries, "logprobs"
        return reading

    def read_choice(self, choice: dict[str, object], reading: EventReading) -> None:
        raise NotImplementedError

    def logprob_entries(self, choice: dict[str, object]) -> int | None:
        raise NotImplementedError

    # -- simulator side ----------------------------------------------------------------------

    def sim_ask(self, data: dict[str, Any], count: CountText, default_max_tokens: int) -> SimAsk:
        prompt_tokens = self.sim_prompt(data, count)
        # vLLM: max_completion_tokens (newer name) wins over max_tokens.
        max_tokens = int_field(data, "max_completion_tokens", 0, 1) or int_field(
            data, "max_tokens", default_max_tokens, 1
        )
        min_tokens = int_field(data, "min_tokens", 0, 0)
        if min_tokens > max_tokens:
            raise BadAsk(f"min_tokens ({min_tokens}) must be <= max_tokens ({max_tokens})")
        options = object_field(data, "stream_options")
        model = data.get("model")
        return SimAsk(
            prompt_tokens=prompt_tokens,
            max_tokens=max_tokens,
            min_tokens=min_tokens,
            ignore_eos=bool_field(data, "ignore_eos"),
            stream=bool_field(data, "stream"),
            include_usage=bool_field(options, "include_usage"),
            continuous_usage=bool_field(options, "continuous_usage_stats"),
            model=model if model is not None else None,
        )

    def sim_prompt(self, data: dict[str, object], count: CountText) -> int:
        raise NotImplementedError

    def _base(self, context: SimContext) -> dict[str, object]:
        return {
            "id": context.response_id,
            "object": self.chunk_object,
            "created": context.created,
            "model": context.model,
        }

    def _event(
        self,
        context: SimContext,
        choice: dict[str, object],
        usage: dict[str, object] | None,
        finish: str | None = None,
    ) -> dict[str, object]:
        full_choice: dict[str, object] = {"index": 0, **choice, "logprobs": None}
        full_choice["finish_reason"] = finish
        if finish is not None:
            full_choice["stop_reason"] = None
        event: dict[str, object] = {**self._base(context), "choices": [full_choice]}
        if usage is not None and context.ask.continuous_usage:
            event["usage"] = usage
        return event

    def sim_token(self, context: SimContext) -> SimEvent:
        prompt = context.ask.prompt_tokens
        running = {"prompt_tokens": prompt, "total_tokens": TOTAL, "completion_tokens": COMPLETION}
        return None, self._event(context, self.text_choice(TEXT), running)

    def sim_reasoning_token(self, context: SimContext) -> SimEvent:
        prompt = context.ask.prompt_tokens
        running = {"prompt_tokens": prompt, "total_tokens": TOTAL, "completion_tokens": COMPLETION}
        return None, self._event(context, self.reasoning_choice(TEXT), running)

    def reasoning_choice(self, text: str) -> dict[str, object]:
        """The choice of a reasoning token's event (only where ``sim_reasoning``)."""
        raise NotImplementedError

    def sim_closing(self, context: SimContext) -> list[SimEvent]:
        usage = _usage(context, context.completion_tokens)
        finish = self._event(context, self.text_choice(None), usage, context.finish_reason)
        events: list[SimEvent] = [(None, finish)]
        if context.ask.include_usage:
            events.append((None, {**self._base(context), "choices": [], "usage": usage}))
        events.append((None, DONE))
        return events

    def sim_whole(self, context: SimContext, text: str) -> dict[str, object] | None:
        choice: dict[str, object] = {"index": 0, **self.whole_choice(text)}
        if context.reasoning_tokens and context.reasoning_text is not None:
            self.whole_reasoning(choice, context.reasoning_text())
        choice.update(logprobs=None, finish_reason=context.finish_reason, stop_reason=None)
        return {
            "id": context.response_id,
            "object": self.whole_object,
            "created": context.created,
            "model": context.model,
            "choices": [choice],
            "usage": _usage(context, context.completion_tokens),
        }

    def text_choice(self, text: str | None) -> dict[str, object]:
        """The choice of a token event (``text`` None: the finish event's, empty)."""
        raise NotImplementedError

    def whole_choice(self, text: str) -> dict[str, object]:
        raise NotImplementedError

    def whole_reasoning(self, choice: dict[str, object], text: str) -> None:
        """Put the reasoning's text into a whole answer's choice (only where
        ``sim_reasoning``)."""
        raise NotImplementedError


class ChatCompletions(OpenAIStream):
    name: ClassVar[str] = "chat"
    path: ClassVar[str] = "/v1/chat/completions"
    fast: ClassVar[FastPath | None] = FastPath(b'"content":"', b'"finish_reason":null', _NOT_PLAIN)
    sim_id_prefix: ClassVar[str] = "chatcmpl-"
    templated: ClassVar[bool] = True
    chunk_object: ClassVar[str] = "chat.completion.chunk"
    whole_object: ClassVar[str] = "chat.completion"
    sim_reasoning: ClassVar[bool] = True  # vLLM's reasoning parser: delta.reasoning_content

    def prompt_fields(self, history: list[dict[str, str]]) -> dict[str, object]:
        return {"messages": history}

    def read_choice(self, choice: dict[str, object], reading: EventReading) -> None:
        delta = choice.get("delta") or choice.get("message") or {}
        if not isinstance(delta, dict):
            return
        content, refusal = delta.get("content"), delta.get("refusal")
        reasoning = delta.get("reasoning_content") or delta.get("reasoning")
        answer = bool(content) or bool(refusal) or bool(delta.get("tool_calls"))
        reading.tokens = answer or bool(reasoning)
        reading.reasoning = not answer and bool(reasoning)
        reading.text = text_of(content) or text_of(refusal)

    def logprob_entries(self, choice: dict[str, object]) -> int | None:
        return list_length(nested(choice, "logprobs", "content"))

    def sim_prompt(self, data: dict[str, object], count: CountText) -> int:
        return count_chat_prompt(data.get("messages"), count)

    def sim_opening(self, context: SimContext) -> list[SimEvent]:
        """Chat streams open with an assistant role chunk."""
        choice: dict[str, object] = {"delta": {"role": "assistant", "content": ""}}
        return [(None, self._event(context, choice, _usage(context, 0)))]

    def text_choice(self, text: str | None) -> dict[str, object]:
        return {"delta": {"content": text}} if text is not None else {"delta": {}}

    def whole_choice(self, text: str) -> dict[str, object]:
        return {"message": {"role": "assistant", "content": text}}

    def reasoning_choice(self, text: str) -> dict[str, object]:
        """vLLM's reasoning delta (a reasoning parser on): its own field, no content."""
        return {"delta": {"reasoning_content": text}}

    def whole_reasoning(self, choice: dict[str, Any], text: str) -> None:
        choice["message"]["reasoning_content"] = text


def _usage(context: SimContext, completion: int) -> dict[str, object]:
    """vLLM's usage; ``prompt_tokens_details`` only where the simulator has a prefix cache
    (vLLM's ``--enable-prompt-tokens-details``)."""
    prompt = context.ask.prompt_tokens
    usage: dict[str, object] = {
        "prompt_tokens": prompt,
        "total_tokens": prompt + completion,
        "completion_tokens": completion,
    }
    if context.cached_tokens is not None:
        usage["prompt_tokens_details"] = {"cached_tokens": context.cached_tokens}
    if context.reasoning_tokens and completion:  # of the whole answer (never a running count)
        usage["completion_tokens_details"] = {"reasoning_tokens": context.reasoning_tokens}
    return usage


DIALECT = ChatCompletions()
