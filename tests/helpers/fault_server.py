"""A loopback OpenAI-style streaming server that misbehaves on request, for reliability tests.

Each request picks its fault from the ``X-Fault`` header, or from a model name
``fault:<name>``; with ``fault_rate`` > 0, requests that name no fault get one of
``rate_faults`` at that probability (the soak benchmark). ``fault_catalogue.FAULTS`` maps
every fault to the category the client must count it under (None: the request must succeed).

Connections are kept alive between requests (HTTP/1.1, chunked SSE bodies in vLLM's
format: role chunk, one content chunk per token, finish chunk, usage chunk, ``[DONE]``)
unless the fault closes them. Everything the server did is counted in ``stats`` (also at
``GET /stats`` as JSON): requests and injected faults per fault, connections, the
``Authorization`` headers received, and whether every assistant message a client sent
back was exactly a text this server had streamed (``history_ok``/``history_bad``).

Run alone (the soak benchmark): ``python -m tests.helpers.fault_server --port 0 --fault-rate 0.01``;
it prints ``fault server listening on http://127.0.0.1:PORT`` when ready.
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import socket
import struct
import threading
import time
from collections import Counter
from typing import Any

from tests.helpers.fault_catalogue import (
    FAULTS,
    MODEL,
    PARTIAL_FAULTS,
    RATE_FAULTS,
    chunk,
    event,
    expected_text,
    token_text,
)


class _Abort(Exception):
    """Stop serving this connection (the client went away, or the fault closes it)."""


class _Request:
    def __init__(self, method: str, path: str, headers: dict[str, str], body: bytes) -> None:
        self.method, self.path, self.headers, self.body = method, path, headers, body
        try:
            parsed = json.loads(body) if body else {}
        except ValueError:
            parsed = {}
        self.json: dict[str, Any] = parsed if isinstance(parsed, dict) else {}


class _Connection:
    """One accepted socket: reads requests (keep-alive, pipelining-safe), writes replies."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buffer = b""

    def read_request(self) -> _Request | None:
        while b"\r\n\r\n" not in self.buffer:
            data = self._recv()
            if not data:
                return None
            self.buffer += data
        head, _, rest = self.buffer.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        method, path, *_ = lines[0].split(" ") + ["", ""]
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        length = int(headers.get("content-length", "0") or 0)
        while len(rest) < length:
            data = self._recv()
            if not data:
                return None
            rest += data
        self.buffer = rest[length:]
        return _Request(method, path, headers, rest[:length])

    def _recv(self) -> bytes:
        try:
            return self.sock.recv(65536)
        except OSError:
            return b""

    def send(self, data: bytes) -> None:
        try:
            self.sock.sendall(data)
        except OSError:
            raise _Abort() from None

    def reset(self) -> None:
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.sock.close()


class FaultServer:
    """``with FaultServer() as server: ... server.url ... server.stats``."""

    def __init__(
        self,
        *,
        port: int = 0,
        gap_s: float = 0.001,
        partial_tokens: int = 3,
        stall_s: float = 2.0,
        slow_gap_s: float = 0.1,
        oversized_bytes: int = 4 * 1024 * 1024 + 1024,
        fault_rate: float = 0.0,
        rate_faults: tuple[str, ...] = RATE_FAULTS,
        seed: int = 0,
    ) -> None:
        self.gap_s = gap_s
        self.partial_tokens = partial_tokens
        self.stall_s = stall_s
        self.slow_gap_s = slow_gap_s
        self.oversized_bytes = oversized_bytes
        self.fault_rate = fault_rate
        self.rate_faults = rate_faults
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self.requests: Counter[str] = Counter()  # completion requests per fault
        self.injected: Counter[str] = Counter()  # per fault, "none" excluded
        self.connections: Counter[str] = Counter()  # connections by first request's fault
        self.authorization: Counter[str] = Counter()  # Authorization values, every request
        self.history_ok: Counter[str] = Counter()  # assistant messages sent back intact
        self.history_bad: Counter[str] = Counter()
        self._sent_texts: set[str] = set()
        self._listener = socket.socket()
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", port))
        self._listener.listen(256)
        self.port = self._listener.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread: threading.Thread | None = None
        self._closed = threading.Event()

    # ----------------------------------------------------------------- lifecycle
    def start(self) -> FaultServer:
        self._thread = threading.Thread(target=self._accept_loop, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._closed.set()
        try:
            self._listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._listener.close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> FaultServer:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

    @property
    def stats(self) -> dict[str, Any]:
        with self._lock:
            return {
                "requests": dict(self.requests),
                "injected": dict(self.injected),
                "expected_errors": self._expected_errors(),
                "connections": dict(self.connections),
                "authorization": dict(self.authorization),
                "history_ok": dict(self.history_ok),
                "history_bad": dict(self.history_bad),
            }

    def _expected_errors(self) -> dict[str, int]:
        errors: Counter[str] = Counter()
        for fault, count in self.injected.items():
            if FAULTS.get(fault):
                errors[FAULTS[fault]] += count
        return dict(errors)

    def _accept_loop(self) -> None:
        while not self._closed.is_set():
            try:
                sock, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(sock,), daemon=True).start()

    # ----------------------------------------------------------------- requests
    def _serve(self, sock: socket.socket) -> None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        connection = _Connection(sock)
        first = True
        try:
            while True:
                request = connection.read_request()
                if request is None:
                    break
                fault = self._pick_fault(request)
                if first:
                    with self._lock:
                        self.connections[fault] += 1
                    first = False
                if not self._respond(connection, request, fault):
                    break
        except _Abort:
            pass
        except Exception as error:  # noqa: BLE001 - a test server bug must show, not hang
            print(f"fault server: {error!r}", flush=True)
        finally:
            try:
                sock.close()
            except OSError:
                pass

    def _pick_fault(self, request: _Request) -> str:
        fault = request.headers.get("x-fault", "")
        model = str(request.json.get("model", ""))
        if not fault and model.startswith("fault:"):
            fault = model.split(":", 1)[1]
        if not request.path.endswith("/completions"):
            return fault or "none"
        if not fault and self.fault_rate > 0:
            with self._lock:
                if self._rng.random() < self.fault_rate:
                    fault = self._rng.choice(self.rate_faults)
        return fault or "none"

    def _respond(self, conn: _Connection, request: _Request, fault: str) -> bool:
        """Serve one request; False when the connection must not be used again."""
        if "authorization" in request.headers:
            with self._lock:
                self.authorization[request.headers["authorization"]] += 1
        if request.method == "GET" and request.path.endswith("/v1/models"):
            if fault == "echo_key":  # the model lookup fails, repeating the key
                auth = request.headers.get("authorization", "")
                message = f"Incorrect API key provided: {auth}"
                return _json_reply(conn, 401, {"error": {"message": message}})
            return _json_reply(conn, 200, {"object": "list", "data": [{"id": MODEL}]})
        if request.method == "GET" and request.path.endswith("/stats"):
            return _json_reply(conn, 200, self.stats)
        if request.method != "POST" or not request.path.endswith("/completions"):
            return _json_reply(conn, 404, {"error": {"message": "not found"}})
        if fault not in FAULTS:
            return _json_reply(conn, 400, {"error": {"message": f"unknown fault {fault!r}"}})
        self._record_request(request, fault)
        return self._stream(conn, request, fault)

    def _record_request(self, request: _Request, fault: str) -> None:
        messages = request.json.get("messages")
        answers = [
            m.get("content")
            for m in (messages if isinstance(messages, list) else [])
            if isinstance(m, dict) and m.get("role") == "assistant"
        ]
        with self._lock:
            self.requests[fault] += 1
            if fault != "none":
                self.injected[fault] += 1
            for answer in answers:
                if answer in self._sent_texts:
                    self.history_ok[fault] += 1
                else:
                    self.history_bad[fault] += 1

    def _stream(self, conn: _Connection, request: _Request, fault: str) -> bool:
        body = request.json
        chat = request.path.endswith("/chat/completions")
        tokens = body.get("max_tokens") if isinstance(body.get("max_tokens"), int) else 8
        tokens = max(tokens, 1)
        usage = bool((body.get("stream_options") or {}).get("include_usage"))
        auth = request.headers.get("authorization", "")

        if fault.startswith("http_"):
            status = int(fault.split("_")[1])
            headers = {"Retry-After": "1"} if status == 429 else {}
            message = {429: "rate limited", 400: "bad request"}.get(status, "server error")
            return _json_reply(conn, status, {"error": {"message": message}}, headers)
        if fault == "echo_key":
            message = f"Incorrect API key provided: {auth}"
            return _json_reply(conn, 401, {"error": {"message": message}})
        if fault == "strict":
            message = "Unrecognized request argument supplied: ignore_eos"
            return _json_reply(conn, 422, {"error": {"message": message}})
        if fault == "not_sse":
            text = expected_text(fault, tokens)
            reply = {
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": text},
                        "finish_reason": "length",
                    }
                ]
            }
            return _json_reply(conn, 200, reply)
        if fault == "bad_http":
            conn.send(b"NOT-HTTP garbage\r\n\r\n")
            return False

        def piece(text: str | None = None, finish: str | None = None) -> bytes:
            if chat:
                delta: dict[str, Any] = {} if text is None else {"content": text}
                choice = {"index": 0, "delta": delta, "finish_reason": finish}
            else:
                choice = {"index": 0, "text": text or "", "finish_reason": finish}
            return event({"id": "x", "object": "chunk", "model": MODEL, "choices": [choice]})

        eof_body = fault == "no_done_eof"
        head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
        head += b"Connection: close\r\n\r\n" if eof_body else b"Transfer-Encoding: chunked\r\n\r\n"
        frame = (lambda data: data) if eof_body else chunk
        conn.send(head)

        if fault == "empty_body":
            conn.send(b"0\r\n\r\n")
            return True
        if fault == "stall_first":
            time.sleep(self.stall_s)
        elif fault == "keepalive_stall":
            end = time.perf_counter() + self.stall_s
            while time.perf_counter() < end:
                conn.send(chunk(b": keep-alive\n\n"))
                time.sleep(0.05)
        if chat:
            role = {
                "index": 0,
                "delta": {"role": "assistant", "content": ""},
                "finish_reason": None,
            }
            conn.send(frame(event({"id": "x", "object": "chunk", "choices": [role]})))

        if fault == "empty":
            tokens = 0
        elif fault in PARTIAL_FAULTS:
            tokens = min(tokens, self.partial_tokens)
        elif fault == "slow_total":
            tokens = 10_000
        sent = 0
        text_parts: list[str] = []
        for index in range(tokens):
            text = token_text(fault, index)
            last = index == tokens - 1
            finish = "length" if last and fault not in PARTIAL_FAULTS + ("no_finish",) else None
            data = frame(piece(text, finish))
            if fault == "utf8_split":
                self._send_split(conn, piece(text, finish), text, index)
            else:
                conn.send(data)
            text_parts.append(text)
            sent += 1
            if not last:
                time.sleep(self.slow_gap_s if fault == "slow_total" else self.gap_s)
        if fault == "empty":
            conn.send(frame(piece(None, "length")))

        if fault == "error_event":
            conn.send(chunk(event({"error": {"message": "overloaded", "code": 503}})))
        elif fault == "echo_key_event":
            conn.send(chunk(event({"error": {"message": f"bad key {auth}", "code": 401}})))
        elif fault == "bad_json":
            conn.send(chunk(b'data: {"choices": [{"delta": {"content": "x"\n\n'))
        elif fault == "reset":
            conn.reset()
            raise _Abort()
        elif fault == "close_early":
            return False
        elif fault == "stall_idle":
            time.sleep(self.stall_s)
        elif fault == "oversized":
            conn.send(chunk(b'data: {"pad": "' + b"x" * self.oversized_bytes + b'"}\n\n'))
        elif fault == "bad_chunk":
            conn.send(b"zz\r\nnot a chunk\r\n")
            return False
        if fault in PARTIAL_FAULTS:
            conn.send(b"0\r\n\r\n")
            return True

        with self._lock:
            self._sent_texts.add("".join(text_parts))
        if usage:
            counts = {"prompt_tokens": 5, "completion_tokens": sent, "total_tokens": 5 + sent}
            conn.send(frame(event({"id": "x", "choices": [], "usage": counts})))
        if fault not in ("no_done", "no_done_eof"):
            conn.send(frame(b"data: [DONE]\n\n"))
        if eof_body:
            return False
        if fault == "done_then_hang":
            time.sleep(self.stall_s)
            return False
        conn.send(b"0\r\n\r\n")
        return fault != "close_keepalive"

    def _send_split(self, conn: _Connection, data: bytes, text: str, index: int) -> None:
        """Cut the event inside its first multi-byte character, in two separate reads:
        even tokens inside one HTTP chunk, odd tokens as two HTTP chunks."""
        encoded = text.encode()
        first_multi = next(i for i, ch in enumerate(text) if len(ch.encode()) > 1)
        offset = len(text[:first_multi].encode()) + 1  # one byte into the character
        cut = data.index(encoded) + offset
        if index % 2 == 0:
            framed = chunk(data)
            cut += len(framed) - len(data) - 2  # the chunk-size line before the data
            parts = [framed[:cut], framed[cut:]]
        else:
            parts = [chunk(data[:cut]), chunk(data[cut:])]
        for part in parts:
            conn.send(part)
            time.sleep(0.002)


def _json_reply(
    conn: _Connection, status: int, data: Any, headers: dict[str, str] | None = None
) -> bool:
    body = json.dumps(data).encode()
    reason = {
        200: "OK",
        400: "Bad Request",
        401: "Unauthorized",
        404: "Not Found",
        429: "Too Many Requests",
        500: "Internal Server Error",
        503: "Service Unavailable",
    }.get(status, "Error")
    head = f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\n"
    head += "".join(f"{name}: {value}\r\n" for name, value in (headers or {}).items())
    head += f"Content-Length: {len(body)}\r\n\r\n"
    conn.send(head.encode() + body)
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--fault-rate", type=float, default=0.0)
    parser.add_argument("--gap-ms", type=float, default=1.0)
    parser.add_argument("--stall-s", type=float, default=2.0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    server = FaultServer(
        port=args.port,
        gap_s=args.gap_ms / 1000,
        stall_s=args.stall_s,
        fault_rate=args.fault_rate,
        seed=args.seed,
    )
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    with server:
        print(f"fault server listening on {server.url}", flush=True)
        stop.wait()
    print(json.dumps(server.stats), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
