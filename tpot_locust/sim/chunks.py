"""vLLM-format response bodies, pre-encoded so each streamed token costs one byte splice.

Per stream the JSON of every chunk kind is rendered once with placeholder slots and split into
byte pieces; a token event then joins the pieces around the escaped token text (and running
counts). Each SSE event is one HTTP chunk of a ``Transfer-Encoding: chunked`` response.
"""

from __future__ import annotations

import json
import re
from typing import Any

from .request import SimRequest

# Placeholders: a string slot is spliced inside its quotes, number slots replace the quotes too.
_TEXT, _TOTAL, _DONE_N = "\x00t\x00", "\x00a\x00", "\x00b\x00"
_SLOT_RE = re.compile(r'\\u0000t\\u0000|"\\u0000[ab]\\u0000"')

DONE_EVENT = b"data: [DONE]\n\n"
LAST_CHUNK = b"0\r\n\r\n"


def dumps(obj: Any) -> bytes:
    """Compact UTF-8 JSON, like vLLM's pydantic output."""
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def http_chunk(payload: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(payload), payload)


def sse_chunk(obj: Any) -> bytes:
    """One SSE event as one HTTP chunk."""
    return http_chunk(b"data: " + dumps(obj) + b"\n\n")


class Template:
    """An SSE event split around its slots; ``chunk(*values)`` is the framed HTTP chunk."""

    __slots__ = ("_head", "_pieces", "_fixed", "_single_tail")

    def __init__(self, obj: Any) -> None:
        text = dumps(obj).decode("utf-8")
        pieces = [p.encode("utf-8") for p in _SLOT_RE.split(text)]
        pieces[0] = b"data: " + pieces[0]
        pieces[-1] += b"\n\n"
        self._fixed = sum(len(p) for p in pieces)
        pieces[-1] += b"\r\n"
        self._head = pieces[0]
        self._pieces = pieces[1:]
        self._single_tail = pieces[1] if len(pieces) == 2 else None

    def chunk1(self, value: bytes) -> bytes:
        """Hot path: a template with exactly one slot (content chunk without usage)."""
        size = self._fixed + len(value)
        return b"%x\r\n%s%s%s" % (size, self._head, value, self._single_tail)

    def chunk(self, *values: bytes) -> bytes:
        if self._single_tail is not None:
            return self.chunk1(values[0])
        out = [b"", self._head]
        for value, piece in zip(values, self._pieces, strict=True):
            out.append(value)
            out.append(piece)
        out[0] = b"%x\r\n" % (self._fixed + sum(len(v) for v in values))
        return b"".join(out)


class StreamEncoder:
    """All bytes of one streamed response, in vLLM's chunk format."""

    def __init__(self, request: SimRequest, response_id: str, created: int) -> None:
        self.request = request
        chat = request.api == "chat"
        self._base = {
            "id": response_id,
            "object": "chat.completion.chunk" if chat else "text_completion",
            "created": created,
            "model": request.model,
        }
        self._continuous = request.continuous_usage
        prompt = request.prompt_tokens
        if chat:
            content_choice = {"delta": {"content": _TEXT}}
        else:
            content_choice = {"text": _TEXT}
        running = {"prompt_tokens": prompt, "total_tokens": _TOTAL, "completion_tokens": _DONE_N}
        self._content = Template(self._event(content_choice, running))

    def _event(
        self, choice: dict[str, Any], usage: dict[str, Any] | None, finish: str | None = None
    ) -> dict[str, Any]:
        full_choice: dict[str, Any] = {"index": 0, **choice, "logprobs": None}
        full_choice["finish_reason"] = finish
        if finish is not None:
            full_choice["stop_reason"] = None
        event: dict[str, Any] = {**self._base, "choices": [full_choice]}
        if usage is not None and self._continuous:
            event["usage"] = usage
        return event

    def _usage(self, completion: int) -> dict[str, int]:
        prompt = self.request.prompt_tokens
        return {
            "prompt_tokens": prompt,
            "total_tokens": prompt + completion,
            "completion_tokens": completion,
        }

    def role(self) -> bytes:
        """Chat streams open with an assistant role chunk; completions have none."""
        if self.request.api != "chat":
            return b""
        choice = {"delta": {"role": "assistant", "content": ""}}
        return sse_chunk(self._event(choice, self._usage(0)))

    def content(self, token: bytes, completion: int) -> bytes:
        """Content chunk for escaped ``token``; ``completion`` = tokens sent so far incl. it."""
        if self._continuous:
            prompt = self.request.prompt_tokens
            return self._content.chunk(token, b"%d" % (prompt + completion), b"%d" % completion)
        return self._content.chunk1(token)

    def finish(self) -> bytes:
        """Finish chunk, optional usage chunk, ``[DONE]`` and the chunked-body terminator."""
        request = self.request
        choice = {"delta": {}} if request.api == "chat" else {"text": ""}
        usage = self._usage(request.completion_tokens)
        parts = [sse_chunk(self._event(choice, usage, request.finish_reason))]
        if request.include_usage:
            parts.append(sse_chunk({**self._base, "choices": [], "usage": usage}))
        parts.append(http_chunk(DONE_EVENT))
        parts.append(LAST_CHUNK)
        return b"".join(parts)


def full_body(request: SimRequest, response_id: str, created: int, text: str) -> bytes:
    """Non-streaming response JSON (chat.completion / text_completion) with usage."""
    completion = request.completion_tokens
    choice: dict[str, Any] = {"index": 0}
    if request.api == "chat":
        choice["message"] = {"role": "assistant", "content": text}
    else:
        choice["text"] = text
    choice.update(logprobs=None, finish_reason=request.finish_reason, stop_reason=None)
    return dumps(
        {
            "id": response_id,
            "object": "chat.completion" if request.api == "chat" else "text_completion",
            "created": created,
            "model": request.model,
            "choices": [choice],
            "usage": {
                "prompt_tokens": request.prompt_tokens,
                "total_tokens": request.prompt_tokens + completion,
                "completion_tokens": completion,
            },
        }
    )
