"""The faults the fault server (``fault_server``) plays, the category the client must count
each under, and the texts it streams: what the reliability tests check a run against."""

from __future__ import annotations

import json
from typing import Any

# fault -> category the client must count (None: the request succeeds)
FAULTS: dict[str, str | None] = {
    "none": None,
    "http_400": "http_4xx",
    "http_429": "http_429",  # with Retry-After
    "http_500": "http_5xx",
    "http_503": "http_5xx",
    "error_event": "stream_error_event",  # data: {"error": {...}} after some tokens
    "reset": "connection_reset",  # RST after some tokens
    "close_early": "truncated",  # clean close after some tokens, no finish_reason
    "no_finish": "truncated",  # every token, usage, [DONE], end of body: no finish_reason
    "no_done": None,  # finish_reason and usage, end of body, no [DONE] (transformers serve)
    "no_done_eof": None,  # the same with a body delimited by the connection's close
    "done_then_hang": None,  # [DONE] then the body stays open (the idle timeout ends it)
    "bad_json": "bad_json",  # an event that is not JSON after some tokens
    "not_sse": "not_sse",  # 200 application/json (a non-streamed completion)
    "stall_first": "timeout_first_token",  # head, then nothing for stall_s
    "keepalive_stall": "timeout_first_token",  # head, then only SSE comments for stall_s
    "stall_idle": "timeout_idle",  # some tokens, then nothing for stall_s
    "slow_total": "timeout_total",  # a token every slow_gap_s, far too many of them
    "oversized": "oversized_event",  # some tokens, then one event of oversized_bytes
    "utf8_split": None,  # multi-byte characters split across reads and HTTP chunks
    "close_keepalive": None,  # a full response, then the kept-alive connection is closed
    "empty": "empty_stream",  # role chunk, finish_reason, usage 0, [DONE]: no token
    "empty_body": "empty_stream",  # 200 text/event-stream with an empty body
    "bad_http": "bad_http",  # garbage instead of a status line
    "bad_chunk": "bad_http",  # some tokens, then broken chunked framing
    "echo_key": "http_4xx",  # 401 whose message repeats the Authorization header (also
    # from GET /v1/models)
    "echo_key_event": "stream_error_event",  # an error event that repeats it
    "strict": "http_4xx",  # 422 for ignore_eos, as transformers serve answers it
}

# tokens a failed request received before its fault (the rest are absent)
PARTIAL_FAULTS = (
    "error_event",
    "reset",
    "close_early",
    "bad_json",
    "stall_idle",
    "oversized",
    "bad_chunk",
    "echo_key_event",
)

# faults the random mix uses: quick ones (no long stalls), each with a distinct category
RATE_FAULTS = (
    "http_429",
    "http_500",
    "error_event",
    "reset",
    "close_early",
    "bad_json",
    "not_sse",
    "empty",
    "bad_chunk",
    "stall_idle",
    "stall_first",
)

WORDS = [" alpha", " beta", " gamma", " delta", " epsilon", " zeta", " eta", " theta"]
UTF8_WORDS = ["é", " €", "😀", " 中文", "ß", " ∑", "🎉", " ñ"]  # 2-, 3- and 4-byte characters
MODEL = "fault-model"


def chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


def event(data: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(data, ensure_ascii=False).encode() + b"\n\n"


def token_text(fault: str, index: int) -> str:
    words = UTF8_WORDS if fault == "utf8_split" else WORDS
    return words[index % len(words)]


def expected_text(fault: str, tokens: int) -> str:
    return "".join(token_text(fault, i) for i in range(tokens))
