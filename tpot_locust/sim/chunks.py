"""Response bodies in any API's dialect, pre-encoded so each streamed token costs one splice.

Per stream the JSON of every event kind (``apis.Dialect.sim_*``) is rendered once with
placeholder slots and split into byte pieces; a token event then joins the pieces around
the escaped token text (and running counts). Each event is one HTTP chunk of a
``Transfer-Encoding: chunked`` response, framed as its API frames events (SSE, NDJSON).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable

from ..apis import dialect_named
from ..apis.dialect import SimAsk, SimContext, SimEvent
from . import vocab
from .request import SimRequest

# A text slot is spliced inside its quotes, number slots replace the quotes too.
_SLOT_RE = re.compile(r'\\u0000(t)\\u0000|"\\u0000([cas])\\u0000"')
LAST_CHUNK = b"0\r\n\r\n"


def dumps(obj: object) -> bytes:
    """Compact UTF-8 JSON, like vLLM's pydantic output."""
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def http_chunk(payload: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(payload), payload)


def frame_of(framing: str, name: str | None) -> tuple[bytes, bytes]:
    """The bytes before and after an event's JSON: SSE (``event:`` line when named)
    or NDJSON (one line)."""
    if framing == "ndjson":
        return b"", b"\n"
    head = b"event: %s\n" % name.encode() if name else b""
    return head + b"data: ", b"\n\n"


def filler_chunk(framing: str, size: int) -> bytes:
    """A non-token event of ``size`` bytes that every client must read past: an SSE comment
    (``: ...``), a blank NDJSON line. It stands for what real streams send between tokens
    (tool-call arguments, reasoning summaries, usage objects: 4-16 KiB): large writes that
    move TCP's segment sizes and congestion window, which token events alone never do."""
    if framing == "ndjson":
        return http_chunk(b" " * max(size - 1, 0) + b"\n")
    return http_chunk(b": " + b"x" * max(size - 4, 0) + b"\n\n")


def event_bytes(framing: str, event: SimEvent) -> bytes:
    """One whole event (no slots) as one HTTP chunk."""
    name, obj = event
    head, tail = frame_of(framing, name)
    return http_chunk(head + (obj if isinstance(obj, bytes) else dumps(obj)) + tail)


class Template:
    """An event split around its slots; ``chunk(values)`` is the framed HTTP chunk, the
    values given in ``slots`` order (t: text, c: tokens so far, a: prompt + those,
    s: the event's index in the stream)."""

    __slots__ = ("_head", "_pieces", "_fixed", "_single_tail", "slots")

    def __init__(self, framing: str, event: SimEvent) -> None:
        name, obj = event
        head, tail = frame_of(framing, name)
        parts = _SLOT_RE.split(dumps(obj).decode("utf-8"))
        # split() gives: text, (t or None), (c/a/s or None), text, ...
        texts = [p.encode("utf-8") for p in parts[0::3]]
        self.slots = tuple(t or n for t, n in zip(parts[1::3], parts[2::3], strict=True))
        texts[0] = head + texts[0]
        texts[-1] += tail
        self._fixed = sum(len(p) for p in texts)
        texts[-1] += b"\r\n"
        self._head = texts[0]
        self._pieces = texts[1:]
        self._single_tail = texts[1] if self.slots == ("t",) else None

    def chunk1(self, value: bytes) -> bytes:
        """Hot path: a template whose one slot is the text."""
        size = self._fixed + len(value)
        return b"%x\r\n%s%s%s" % (size, self._head, value, self._single_tail)

    def chunk(self, values: list[bytes]) -> bytes:
        if self._single_tail is not None:
            return self.chunk1(values[0])
        out = [b"", self._head]
        for value, piece in zip(values, self._pieces, strict=True):
            out.append(value)
            out.append(piece)
        out[0] = b"%x\r\n" % (self._fixed + sum(len(v) for v in values))
        return b"".join(out)


class StreamEncoder:
    """All bytes of one streamed response, in its API's format. With reasoning, the first
    ``request.reasoning_tokens`` tokens use the dialect's reasoning template, rendered
    beside the answer's: a token is still one splice."""

    def __init__(self, request: SimRequest, response_id: str, created: int) -> None:
        self.request = request
        dialect = self.dialect = dialect_named(request.api)
        self.media_type = dialect.media_types[0]
        self._framing = framing = dialect.framing
        self._context = context = sim_context(request, response_id, created)
        opening = dialect.sim_opening(context)
        self._opening = b"".join(event_bytes(framing, event) for event in opening)
        self._first_sequence = len(opening)
        self._content = Template(framing, dialect.sim_token(context))
        last = dialect.sim_last_token(context)
        self._last = Template(framing, last) if last is not None else None
        self._text_only = self._content.slots == ("t",)
        # reasoning: tokens 1..R; the answer's first token (R + 1) follows the events that
        # end the reasoning (``_answer_start``); 0: never (completion counts from 1)
        self._reasoning = reasoning = request.reasoning_tokens
        self._first_answer = reasoning + 1 if reasoning else 0
        self._thinking = (
            Template(framing, dialect.sim_reasoning_token(context)) if reasoning else None
        )
        self._shift = 0  # events between the reasoning and the answer (SEQUENCE slots)

    @property
    def framing(self) -> str:
        return self._framing

    def opening(self) -> bytes:
        """The events before the first token (a chat role chunk; none for completions)."""
        return self._opening

    def plain(self) -> tuple[int, int, Callable[[bytes], bytes]]:
        """(lo, hi, chunk): for ``lo < completion < hi``, ``content(token, completion)`` is
        ``chunk(token)``, one splice with no other slot (the hot path, called directly);
        ``lo == hi``: never."""
        if not self._text_only:
            return 0, 0, self._content.chunk1
        total = self.request.completion_tokens
        return (
            self._reasoning + 1,
            total if self._last is not None else total + 1,
            (self._content.chunk1),
        )

    def content(self, token: bytes, completion: int) -> bytes:
        """Token event for escaped ``token``; ``completion`` = tokens sent so far incl. it."""
        if completion <= self._reasoning:
            template = self._thinking
            assert template is not None
            if completion == 1 and (tags := self.dialect.sim_think_tags) is not None:
                token = tags[0].encode() + token
        elif completion == self._first_answer:
            return self._answer_start(token, completion)
        else:
            template = self._content
            if self._last is not None and completion >= self.request.completion_tokens:
                template = self._last
            elif self._text_only:
                return template.chunk1(token)
        return template.chunk([self._slot(slot, token, completion) for slot in template.slots])

    def _answer_start(self, token: bytes, completion: int) -> bytes:
        """The first answer token after reasoning: the events that end the reasoning, then
        its own (inline thinking: the closing tag leads its text)."""
        dialect, framing = self.dialect, self._framing
        between = dialect.sim_reasoning_end(self._context)
        self._shift = len(between)
        head = b"".join(event_bytes(framing, event) for event in between)
        if (tags := dialect.sim_think_tags) is not None:
            token = tags[1].encode() + token
        template = self._content
        if self._last is not None and completion >= self.request.completion_tokens:
            template = self._last
        values = [self._slot(slot, token, completion) for slot in template.slots]
        return head + template.chunk(values)

    def _slot(self, slot: str, token: bytes, completion: int) -> bytes:
        if slot == "t":
            return token
        if slot == "c":
            return b"%d" % completion
        if slot == "a":
            return b"%d" % (self.request.prompt_tokens + completion)
        return b"%d" % (self._first_sequence + completion - 1 + self._shift)

    def finish(self) -> bytes:
        """The closing events (finish, usage, end marker) and the chunked-body terminator."""
        context = self._context
        parts = [event_bytes(self._framing, event) for event in self.dialect.sim_closing(context)]
        parts.append(LAST_CHUNK)
        return b"".join(parts)


def sim_context(request: SimRequest, response_id: str, created: int) -> SimContext:
    ask = SimAsk(
        prompt_tokens=request.prompt_tokens,
        max_tokens=request.max_tokens,
        min_tokens=request.min_tokens,
        ignore_eos=request.ignore_eos,
        stream=request.stream,
        include_usage=request.include_usage,
        continuous_usage=request.continuous_usage,
    )
    reasoning = request.reasoning_tokens
    return SimContext(
        response_id,
        request.model,
        created,
        ask,
        request.completion_tokens,
        request.finish_reason,
        answer_text=lambda: vocab.text(request.completion_tokens, reasoning),
        cached_tokens=request.cached_tokens,
        reasoning_tokens=reasoning,
        reasoning_text=lambda: vocab.text(reasoning),
    )


def full_body(
    request: SimRequest, response_id: str, created: int, text: str | None = None
) -> bytes:
    """A non-streaming answer's JSON (only APIs that ``serves_whole``): its answer ``text``
    (default: the vocabulary's, after the reasoning), and its reasoning in the API's form
    (``SimContext.reasoning_text``)."""
    context = sim_context(request, response_id, created)
    if text is None:
        text = vocab.text(request.completion_tokens, request.reasoning_tokens)
    body = dialect_named(request.api).sim_whole(context, text)
    return dumps(body)
