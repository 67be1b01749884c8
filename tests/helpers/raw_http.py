"""An HTTP/1.1 request as the bytes a client writes, for the simulator's parser and server."""

from __future__ import annotations

import json
from typing import Any


def request_bytes(
    method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
) -> bytes:
    payload = (
        b"" if body is None else body if isinstance(body, bytes) else json.dumps(body).encode()
    )
    lines = [f"{method} {path} HTTP/1.1", "Host: sim"]
    lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
    if body is not None:
        lines += ["Content-Type: application/json", f"Content-Length: {len(payload)}"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + payload
