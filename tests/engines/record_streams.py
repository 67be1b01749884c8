"""Record real engines' streamed answers as test data: ``python -m tests.engines.record_streams``.

Each engine serves the tiny model; one chat request (and, for vLLM, one completions
request) is sent on a plain socket and every read of the answer is written with its time
since the send, framing included, to ``tests/data/streams/ENGINE-API.jsonl``: a first line
with what was sent, then ``{"t": seconds, "data": text}`` per read (bytes as latin-1). The
parser tests (``tests/unit/test_recorded_streams.py``) replay them through our client.
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
    "chat": ("/v1/chat/completions", {
        "model": servers.MODEL_NAME, "stream": True, "max_tokens": MAX_TOKENS,
        "stream_options": {"include_usage": True},
        "messages": [{"role": "user", "content": PROMPT}],
    }),
    "completions": ("/v1/completions", {
        "model": servers.MODEL_NAME, "stream": True, "max_tokens": MAX_TOKENS,
        "stream_options": {"include_usage": True}, "prompt": PROMPT,
    }),
}  # fmt: skip
APIS = {"vllm": ("chat", "completions"), "transformers": ("chat",)}


def record(url: str, path: str, body: dict) -> list[dict]:
    """Every read of one answer: its time since the send and its bytes."""
    parts = urlsplit(url)
    payload = json.dumps(body).encode()
    head = (
        f"POST {path} HTTP/1.1\r\nHost: {parts.netloc}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(payload)}\r\nConnection: close\r\n\r\n"
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


def main(engines: list[str]) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    for engine in engines:
        with tempfile.TemporaryDirectory() as logs, servers.serve(engine, Path(logs)) as server:
            for api in APIS[engine]:
                path, body = REQUESTS[api]
                # transformers serve answers only to the name it lists (the model's folder)
                body = {**body, "model": servers.models(server.url)[0]}
                reads = record(server.url, path, body)
                meta = {"engine": engine, "installed": list(envs.ENGINES[engine].requirements),
                        "api": api, "path": path, "request": body,
                        "max_tokens": MAX_TOKENS}  # fmt: skip
                target = OUT / f"{engine}-{api}.jsonl"
                lines = [json.dumps(meta), *(json.dumps(read) for read in reads)]
                target.write_text("\n".join(lines) + "\n")
                print(f"{target}: {len(reads)} reads")


if __name__ == "__main__":
    main(sys.argv[1:] or list(APIS))
