"""SGLang's native generate API (``/generate``), as its HTTP server streams it.

Source: sgl-project/sglang ``python/sglang/srt/entrypoints/http_server.py``
(``generate_request``) and ``python/sglang/srt/managers/tokenizer_manager.py``
(``_handle_batch_output``, ``_wait_one_response``). A request is ``{"text", "sampling_params":
{"max_new_tokens", "min_new_tokens", "ignore_eos"}, "stream": true}``; the stream is
``data: {"text", "output_ids", "meta_info": {"id", "finish_reason", "prompt_tokens",
"weight_version", "num_retractions", "reasoning_tokens", "completion_tokens",
"cached_tokens", ...}}`` events, then ``data: [DONE]``. ``completion_tokens`` is the running
count, on every event, so a token event is one whose count grew (by how much it grew).
``finish_reason`` is null until the last token's event, then ``{"type": "length", "length":
N}``, ``{"type": "stop", "matched": <token id or text>}`` or ``{"type": "abort", "message":
...}`` (a failure). A failure raised before the stream starts arrives as ``{"error":
{"message": ...}}`` (the shared error rule).

``text`` is the whole text so far by default, each event repeating all earlier text, and
only the new text (with ``output_ids`` the new ids) when the server runs with
``--incremental-streaming-output``; a stream's reader (``for_stream``) tells the two apart
from the second text-bearing event: in whole-text mode ``output_ids`` holds every id so far
(as many as ``completion_tokens``), incrementally only the new ones (where a server sends no
ids: whether the text starts with all earlier text). The native API has no reasoning
channel: a reasoning model's thinking is inline text between ``<think>`` and ``</think>``,
read as reasoning tokens (``InlineThinking``), and ``meta_info.reasoning_tokens`` counts them
when the server runs a reasoning parser (0 otherwise, so 0 is not taken as a count).
"""

from __future__ import annotations

from collections.abc import Sequence
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
    bool_field,
    finish_words,
    object_field,
    text_of,
    token_count,
)
from tpot_locust.apis.errors import error_message
from tpot_locust.apis.prompt_counts import count_completion_prompt
from tpot_locust.apis.think_tags import THINK_CLOSE, THINK_OPEN, InlineThinking

DONE = b"[DONE]"
EOS_TOKEN_ID = 2  # the id a simulated "stop" matched (SGLang reports the EOS token's id)
WEIGHT_VERSION = "default"  # SGLang's ``--weight-version`` default
_META = "meta_info"


class SGLangGenerate(Dialect):
    """The dialect; each stream is read by its own ``SGLangStream`` (``for_stream``)."""

    name: ClassVar[str] = "sglang"
    path: ClassVar[str] = "/generate"
    done_marker: ClassVar[bytes | None] = DONE
    models_path: ClassVar[str | None] = None  # the body names no model
    serves_whole: ClassVar[bool] = True
    sim_reasoning: ClassVar[bool] = True  # inline, between <think> tags
    sim_think_tags: ClassVar[tuple[str, str] | None] = (THINK_OPEN, THINK_CLOSE)

    def body(self, history: list[dict[str, str]], options: BodyOptions) -> dict[str, object]:
        params: dict[str, object] = {"max_new_tokens": options.max_tokens}
        if options.force_min_tokens:
            params["min_new_tokens"] = options.max_tokens
        if options.ignore_eos:
            params["ignore_eos"] = True
        text = "\n\n".join(message["content"] for message in history)
        return {"text": text, "sampling_params": params, "stream": True}

    def for_stream(self) -> Dialect:
        return SGLangStream()

    def read(self, event: dict[str, object], name: str | None) -> EventReading:
        """One event read on its own (no stream: its text taken as new text)."""
        return SGLangStream().read(event, name)

    # -- simulator side ----------------------------------------------------------------------

    def sim_ask(self, data: dict[str, object], count: CountText, default_max_tokens: int) -> SimAsk:
        params = object_field(data, "sampling_params")
        max_tokens = _max_new_tokens(params, default_max_tokens)
        min_tokens = _min_new_tokens(params, max_tokens)
        return SimAsk(
            prompt_tokens=_prompt_tokens(data, count),
            max_tokens=max_tokens,
            min_tokens=min_tokens,
            ignore_eos=bool_field(params, "ignore_eos"),
            stream=bool_field(data, "stream"),
        )

    def sim_token(self, context: SimContext) -> SimEvent:
        """Incremental text (``--incremental-streaming-output``): the whole text so far on
        every event would be O(n^2) bytes a stream."""
        return None, self._event(context, TEXT, [SEQUENCE], None, COMPLETION)

    def sim_reasoning_token(self, context: SimContext) -> SimEvent:
        """The same event: the thinking is inline text (``sim_think_tags``)."""
        return self.sim_token(context)

    def sim_last_token(self, context: SimContext) -> SimEvent | None:
        """The last token's event: the finish reason, and the reasoning's count (a
        reasoning parser's ``meta_info.reasoning_tokens``; 0 on the others)."""
        finish = _finish(context)
        return None, self._event(
            context, TEXT, [SEQUENCE], finish, COMPLETION, context.reasoning_tokens
        )

    def sim_closing(self, context: SimContext) -> list[SimEvent]:
        return [(None, DONE)]

    def sim_whole(self, context: SimContext, text: str) -> dict[str, object] | None:
        ids = list(range(context.completion_tokens))
        if context.reasoning_tokens and context.reasoning_text is not None:
            text = f"{THINK_OPEN}{context.reasoning_text()}{THINK_CLOSE}{text}"
        return self._event(
            context,
            text,
            ids,
            _finish(context),
            context.completion_tokens,
            context.reasoning_tokens,
        )

    def _event(
        self,
        context: SimContext,
        text: str,
        ids: Sequence[object],
        finish: dict[str, object] | None,
        completion: object,
        reasoning: int = 0,
    ) -> dict[str, object]:
        """An output as ``_handle_batch_output`` builds it (no ``e2e_latency``: the
        simulator renders the last event before it is sent)."""
        meta = {
            "id": context.response_id,
            "finish_reason": finish,
            "prompt_tokens": context.ask.prompt_tokens,
            "weight_version": WEIGHT_VERSION,
            "num_retractions": 0,
            "reasoning_tokens": reasoning,
            "completion_tokens": completion,
            "cached_tokens": context.cached_tokens or 0,
        }
        return {"text": text, "output_ids": ids, _META: meta}


class SGLangStream(SGLangGenerate):
    """One stream's reader: the text and count so far, to take each event's new part."""

    def __init__(self) -> None:
        self._completion = 0  # the last completion_tokens
        self._cumulative: bool | None = None  # whole-text mode; None: not told yet
        self._head = ""  # the text so far (whole-text mode; until the mode is told)
        self._thinking = InlineThinking()

    def read(self, event: dict[str, object], name: str | None) -> EventReading:
        meta = event.get(_META)
        if not isinstance(meta, dict):
            meta = None
        reading = EventReading(
            completion=token_count(meta, "completion_tokens", _META),
            prompt=token_count(meta, "prompt_tokens", _META),
            cached=token_count(meta, "cached_tokens", _META),
            reasoning_reported=token_count(meta, "reasoning_tokens", _META) or None,
        )
        finish = meta.get("finish_reason") if meta is not None else None
        if isinstance(finish, dict):
            if finish.get("type") == "abort":
                reading.error = error_message(finish.get("message") or finish)
                return reading
            reading.finish_reason = finish_words(finish.get("type"))
        else:  # a server that says it in words
            reading.finish_reason = finish_words(finish)
        completion = reading.completion
        new_text = self._new_text(text_of(event.get("text")), event.get("output_ids"), completion)
        if completion is None:
            reading.tokens = bool(new_text)
        else:
            reading.tokens = completion > self._completion
            self._completion = max(self._completion, completion)
        reasoning, reading.text = self._thinking.split(new_text)
        reading.reasoning = reasoning and reading.tokens
        return reading

    def _new_text(self, text: str, ids: object, completion: int | None) -> str:
        """The event's new text, in either mode (told from the second text, and undone if a
        later text does not start with all earlier text)."""
        head = self._head
        if self._cumulative is None:
            if not head:  # no text yet: this text is new in either mode
                self._head = text
                return text
            self._cumulative = self._whole_text(text, ids, completion)
        if not self._cumulative:
            return text
        if not text.startswith(head):  # not the whole text after all
            self._cumulative = False
            return text
        self._head = text
        return text[len(head) :]

    def _whole_text(self, text: str, ids: object, completion: int | None) -> bool:
        """Whether events carry the whole text so far: their ``output_ids`` are every id
        (as many as the running count), or the text is longer than all earlier text and
        starts with it (some SGLang versions send the whole text with only the new ids)."""
        if isinstance(ids, list) and completion is not None and completion > 1:
            if len(ids) == completion:
                return True
        return len(text) > len(self._head) and text.startswith(self._head)


def _prompt_tokens(data: dict[str, object], count: CountText) -> int:
    """Prompt tokens of ``text`` (one prompt: a list of texts is a batch, not simulated) or
    of ``input_ids``."""
    text, ids = data.get("text"), data.get("input_ids")
    if isinstance(text, str):
        return count_completion_prompt(text, count, "text")
    if text is None and isinstance(ids, list) and ids:
        if all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
            return len(ids)
    if text is None and ids is None:
        raise BadAsk("Either text, input_ids or input_embeds should be provided.")
    raise BadAsk("only one prompt is simulated: 'text' a string or 'input_ids' a list of ids")


def _max_new_tokens(params: dict[str, object], default: int) -> int:
    value = params.get("max_new_tokens")
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadAsk("'max_new_tokens' must be an integer")
    if value < 0:
        raise BadAsk(f"max_new_tokens must be at least 0, got {value}.")
    if value == 0:
        raise BadAsk("max_new_tokens 0 (a prefill only) is not simulated")
    if value > MAX_INT_FIELD:  # more is no request, only a hang
        raise BadAsk(f"'max_new_tokens' must be at most {MAX_INT_FIELD}")
    return value


def _min_new_tokens(params: dict[str, object], max_tokens: int) -> int:
    value = params.get("min_new_tokens", 0)
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadAsk("'min_new_tokens' must be an integer")
    if value < 0:
        raise BadAsk(f"min_new_tokens must be in [0, max_new_tokens], got {value}.")
    if value > max_tokens:
        raise BadAsk(f"min_new_tokens must be in [0, max_new_tokens({max_tokens})], got {value}.")
    return value


def _finish(context: SimContext) -> dict[str, object]:
    """The finish reason as SGLang's scheduler words it."""
    if context.finish_reason == "length":
        return {"type": "length", "length": context.ask.max_tokens}
    return {"type": "stop", "matched": EOS_TOKEN_ID}


DIALECT = SGLangGenerate()
