"""Record real engines' streamed answers as test data: ``python -m tests.engines.record_streams``.

Each engine serves the tiny model; one request per API it serves (``APIS``) is sent on a
plain socket and every read of the answer is written with its time since the send, framing
included, to ``tests/data/streams/ENGINE-API.jsonl``: a first line with what was sent, then
``{"t": seconds, "data": text}`` per read (bytes as latin-1). The parser tests
(``tests/unit/test_recorded_streams.py``) replay them through our client.

Arguments choose what to record: ``vllm`` (all its APIs) or ``vllm:responses,messages``
(only those), so adding an API re-records nothing else; none: everything.
"""

from __future__ import annotations

import json
import socket
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

from tests.engines import envs, servers

OUT = Path(__file__).resolve().parents[1] / "data" / "streams"
MAX_TOKENS = 12
PROMPT = "Write about load testing an inference server, one short sentence."
REQUESTS = {  # api -> (path, body); ignore_eos is left out: transformers serve refuses it.
    "chat": (
        "/v1/chat/completions",
        {
            "model": servers.MODEL_NAME,
            "stream": True,
            "max_tokens": MAX_TOKENS,
            "stream_options": {"include_usage": True},
            "messages": [{"role": "user", "content": PROMPT}],
        },
    ),
    "completions": (
        "/v1/completions",
        {
            "model": servers.MODEL_NAME,
            "stream": True,
            "max_tokens": MAX_TOKENS,
            "stream_options": {"include_usage": True},
            "prompt": PROMPT,
        },
    ),
    # OpenAI's Responses API: usage always comes with response.completed
    "responses": (
        "/v1/responses",
        {
            "model": servers.MODEL_NAME,
            "stream": True,
            "max_output_tokens": MAX_TOKENS,
            "input": [{"role": "user", "content": PROMPT}],
        },
    ),
    # Anthropic's Messages API (vLLM serves it): usage in message_start and message_delta
    "messages": (
        "/v1/messages",
        {
            "model": servers.MODEL_NAME,
            "stream": True,
            "max_tokens": MAX_TOKENS,
            "messages": [{"role": "user", "content": PROMPT}],
        },
    ),
}
HEADERS = {"messages": {"anthropic-version": "2023-06-01"}}  # api -> its own headers
APIS = {
    "vllm": ("chat", "completions", "responses", "messages"),
    "transformers": ("chat", "responses"),
}


def record(url: str, path: str, body: dict, headers: dict[str, str] | None = None) -> list[dict]:
    """Every read of one answer: its time since the send and its bytes."""
    parts = urlsplit(url)
    payload = json.dumps(body).encode()
    extra = "".join(f"{name}: {value}\r\n" for name, value in (headers or {}).items())
    head = (
        f"POST {path} HTTP/1.1\r\nHost: {parts.netloc}\r\nContent-Type: application/json\r\n"
        f"{extra}Content-Length: {len(payload)}\r\nConnection: close\r\n\r\n"
    ).encode()
    reads = []
    with socket.create_connection((parts.hostname, parts.port), timeout=60) as sock:
        sent = time.perf_counter()
        sock.sendall(head + payload)
        while data := sock.recv(65536):
            reads.append(
                {"t": round(time.perf_counter() - sent, 6), "data": data.decode("latin-1")}
            )
    return reads


def chosen(args: list[str]) -> dict[str, tuple[str, ...]]:
    """engine -> the APIs to record, from ``engine`` or ``engine:api,api`` arguments."""
    if not args:
        return dict(APIS)
    wanted: dict[str, tuple[str, ...]] = {}
    for arg in args:
        engine, _, apis = arg.partition(":")
        names = tuple(apis.split(",")) if apis else APIS[engine]
        unknown = set(names) - set(APIS[engine])
        if unknown:
            raise SystemExit(f"{engine} does not serve {sorted(unknown)}: {APIS[engine]}")
        wanted[engine] = names
    return wanted


def main(wanted: dict[str, tuple[str, ...]]) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    for engine, apis in wanted.items():
        with tempfile.TemporaryDirectory() as logs, servers.serve(engine, Path(logs)) as server:
            for api in apis:
                path, body = REQUESTS[api]
                # transformers serve answers only to the name it lists (the model's folder)
                body = {**body, "model": servers.models(server.url)[0]}
                reads = record(server.url, path, body, HEADERS.get(api))
                meta = {
                    "engine": engine,
                    "installed": list(envs.ENGINES[engine].requirements),
                    "api": api,
                    "path": path,
                    "request": body,
                    "max_tokens": MAX_TOKENS,
                }
                target = OUT / f"{engine}-{api}.jsonl"
                lines = [json.dumps(meta), *(json.dumps(read) for read in reads)]
                target.write_text("\n".join(lines) + "\n")
                print(f"{target}: {len(reads)} reads")


if __name__ == "__main__":
    main(chosen(sys.argv[1:]))
