"""Error events every API's stream may carry, whatever its own shape.

Servers report a failure mid-stream in a handful of shapes: an SSE ``event: error``
(llama.cpp, OpenAI's Responses API), an ``error`` member (OpenAI, vLLM, SGLang, TGI,
Anthropic, Ollama), a top-level ``{"object": "error", "message": ...}`` (vLLM's older
error shape) and FastChat's ``{"text": ..., "error_code": 50001}``. Each fails the request
with the server's message.
"""

from __future__ import annotations

import json

MAX_MESSAGE_CHARS = 200


def error_message(error: object) -> str:
    """An error member's message: ``{"message": ...}``, ``{"error": ...}``, a text, or the
    whole value."""
    if isinstance(error, dict):
        inner = error.get("message") or error.get("error")
        if isinstance(inner, dict):
            return error_message(inner)
        return str(inner or error)[:MAX_MESSAGE_CHARS]
    return str(error)[:MAX_MESSAGE_CHARS]


def shared_error(event: dict[str, object], name: str | None) -> str | None:
    """The server's message when ``event`` (its SSE event ``name``) reports an error."""
    if name == "error":
        return error_message(event) or "error event"
    if event.get("error"):
        return error_message(event["error"])
    if event.get("object") == "error" or event.get("type") == "error":
        return error_message(event.get("message") or event)
    code = event.get("error_code")
    if code not in (None, 0) and not isinstance(code, bool):
        return str(event.get("text") or f"error_code {code}")[:MAX_MESSAGE_CHARS]
    return None


def raw_error(payload: bytes) -> str:
    """The message of an ``event: error`` whose data is not JSON."""
    try:
        parsed = json.loads(payload)
    except (ValueError, RecursionError):
        return payload[:MAX_MESSAGE_CHARS].decode("utf-8", "replace")
    return error_message(parsed)
