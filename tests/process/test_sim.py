"""Tests of the embedded simulator: real subprocesses, stdlib HTTP clients, truth checks."""

from __future__ import annotations

import http.client
import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.raw_http import request_bytes
from tpot_locust.common.kernel_stamps import ANCILLARY_BYTES, enable_kernel_stamps, kernel_wall_ns
from tpot_locust.sim.process import SimProcess, start_simulator
from tpot_locust.sim.truth import read_truth
from tpot_locust.sim.vocab import text as vocab_text

GAP_MS = 2.0
TTFT_MS = 20.0
USAGE = {"include_usage": True}


# -- helpers -----------------------------------------------------------------------------------


class RawResponse:
    def __init__(self, status: int, headers: dict[str, str], chunks: list[bytes], body: bytes):
        self.status = status
        self.headers = headers
        self.chunks = chunks  # HTTP chunks of a chunked body, in order (terminator excluded)
        self.body = body

    def events(self) -> list[str]:
        """SSE payloads; asserts each HTTP chunk is exactly one ``data: ...\\n\\n`` event."""
        out = []
        for chunk in self.chunks:
            text = chunk.decode("utf-8")
            assert text.startswith("data: ") and text.endswith("\n\n"), text
            assert text.count("\n\n") == 1, text
            out.append(text[len("data: ") : -2])
        return out


def read_response(f: Any) -> RawResponse:
    """Parse one response from a socket file, keeping chunk boundaries visible."""
    status = int(f.readline().split()[1])
    headers = {}
    while (line := f.readline()) not in (b"\r\n", b""):
        name, _, value = line.decode().partition(":")
        headers[name.strip().lower()] = value.strip()
    chunks: list[bytes] = []
    if headers.get("transfer-encoding") == "chunked":
        while True:
            size = int(f.readline().strip(), 16)
            data = f.read(size + 2)
            assert data.endswith(b"\r\n")
            if size == 0:
                break
            chunks.append(data[:-2])
        return RawResponse(status, headers, chunks, b"".join(chunks))
    return RawResponse(status, headers, chunks, f.read(int(headers.get("content-length", "0"))))


def exchange(sim: SimProcess, method: str, path: str, body: Any = None, **headers: str):
    with socket.create_connection((sim.host, sim.port), timeout=10) as sock:
        sock.sendall(request_bytes(method, path, body, {**headers, "Connection": "close"}))
        with sock.makefile("rb") as f:
            return read_response(f)


def wait_truth(sim: SimProcess, request_id: str, timeout_s: float = 3.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        for record in sim.read_truth():
            if record["request_id"] == request_id:
                return record
        assert time.monotonic() < deadline, f"no truth line for {request_id}"
        time.sleep(0.02)


def chat_body(**fields: Any) -> dict[str, Any]:
    return {
        "model": "tpot-sim",
        "messages": [{"role": "user", "content": "hi there you"}],
        **fields,
    }


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimProcess]:
    truth = tmp_path_factory.mktemp("sim") / "truth.jsonl"
    args = ["--gap-ms", str(GAP_MS), "--ttft-ms", str(TTFT_MS), "--natural-tokens", "5"]
    with start_simulator(*args, truth=truth) as process:
        yield process


# -- endpoints -----------------------------------------------------------------------------------


def test_models_and_health(sim: SimProcess) -> None:
    conn = http.client.HTTPConnection(sim.host, sim.port, timeout=5)
    conn.request("GET", "/v1/models")
    response = conn.getresponse()
    assert response.status == 200
    models = json.loads(response.read())
    assert models["object"] == "list"
    assert [m["id"] for m in models["data"]] == ["tpot-sim"]
    assert models["data"][0]["object"] == "model"
    conn.request("GET", "/health")
    response = conn.getresponse()
    assert response.status == 200
    assert response.read() in (b"", b"ok")
    conn.close()


def test_streamed_chat_vllm_format_and_truth(sim: SimProcess) -> None:
    before = time.perf_counter_ns()
    response = exchange(
        sim,
        "POST",
        "/v1/chat/completions",
        chat_body(
            max_tokens=50, ignore_eos=True, stream=True, stream_options={"include_usage": True}
        ),
        **{"X-Request-Id": "req-chat-50"},
    )
    after = time.perf_counter_ns()
    assert response.status == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    assert response.headers["transfer-encoding"] == "chunked"
    events = response.events()
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    role, contents, finish, usage = chunks[0], chunks[1:51], chunks[51], chunks[52]
    assert len(chunks) == 53
    base = {
        "id": "chatcmpl-req-chat-50",
        "object": "chat.completion.chunk",
        "created": role["created"],
        "model": "tpot-sim",
    }
    assert isinstance(role["created"], int)
    assert role == {
        **base,
        "choices": [
            {
                "index": 0,
                "delta": {"role": "assistant", "content": ""},
                "logprobs": None,
                "finish_reason": None,
            }
        ],
    }
    for chunk in contents:
        assert chunk == {
            **base,
            "choices": [
                {
                    "index": 0,
                    "delta": {"content": chunk["choices"][0]["delta"]["content"]},
                    "logprobs": None,
                    "finish_reason": None,
                }
            ],
        }
    text = "".join(c["choices"][0]["delta"]["content"] for c in contents)
    assert text == vocab_text(50)
    assert all(c["choices"][0]["delta"]["content"].startswith(" ") for c in contents)
    assert finish["choices"][0]["delta"] == {}
    assert finish["choices"][0]["finish_reason"] == "length"
    assert "usage" not in finish
    assert usage == {
        **base,
        "choices": [],
        "usage": {"prompt_tokens": 3, "total_tokens": 53, "completion_tokens": 50},
    }

    truth = wait_truth(sim, "req-chat-50")
    assert truth["api"] == "chat"
    assert truth["aborted"] is False
    assert (truth["prompt_tokens"], truth["completion_tokens"]) == (3, 50)
    assert truth["tokens"] == [1] * 50
    send = truth["send_ns"]
    assert len(send) == 50 and send == sorted(send)
    offset = truth["perf_offset_ns"]
    # Monotonic stamps of the server and of this process are on one clock.
    assert before < truth["arrival_ns"] - offset < send[0] - offset < after
    gaps = sorted(b - a for a, b in zip(send, send[1:], strict=False))
    assert 1.0e6 < gaps[len(gaps) // 2] < 3.5e6
    # Token k is due exactly at arrival + TTFT + k * gap: never sent early, and lateness does
    # not grow along the stream (the schedule is absolute, so there is no drift).
    due = [truth["arrival_ns"] + int(TTFT_MS * 1e6) + k * int(GAP_MS * 1e6) for k in range(50)]
    lateness = [s - d for s, d in zip(send, due, strict=True)]
    assert min(lateness) >= 0
    assert sorted(lateness[-10:])[5] < 5e6


def test_streamed_completions_with_continuous_usage(sim: SimProcess) -> None:
    body = {
        "prompt": "one two three four",
        "max_tokens": 4,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }
    response = exchange(sim, "POST", "/v1/completions", body, **{"X-Request-Id": "req-cmpl"})
    events = response.events()
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert len(chunks) == 6  # 4 tokens, finish, usage: no role chunk
    for i, chunk in enumerate(chunks[:4], start=1):
        assert chunk["id"] == "cmpl-req-cmpl"
        assert chunk["object"] == "text_completion"
        choice = chunk["choices"][0]
        assert set(choice) == {"index", "text", "logprobs", "finish_reason"}
        assert choice["finish_reason"] is None
        assert chunk["usage"] == {"prompt_tokens": 4, "total_tokens": 4 + i, "completion_tokens": i}
    assert "".join(c["choices"][0]["text"] for c in chunks[:4]) == vocab_text(4)
    assert chunks[4]["choices"][0]["text"] == ""
    assert chunks[4]["choices"][0]["finish_reason"] == "length"
    assert chunks[5]["choices"] == []
    assert chunks[5]["usage"]["completion_tokens"] == 4
    truth = wait_truth(sim, "req-cmpl")
    assert truth["api"] == "completions"
    assert len(truth["send_ns"]) == 4


def test_non_streaming_chat_and_completions(sim: SimProcess) -> None:
    start = time.monotonic()
    body = chat_body(max_tokens=20, ignore_eos=True)
    response = exchange(sim, "POST", "/v1/chat/completions", body, **{"X-Request-Id": "req-ns"})
    elapsed = time.monotonic() - start
    assert response.status == 200
    assert response.headers["content-type"] == "application/json"
    data = json.loads(response.body)
    assert data["object"] == "chat.completion"
    assert data["choices"][0]["message"] == {"role": "assistant", "content": vocab_text(20)}
    assert data["choices"][0]["finish_reason"] == "length"
    assert data["usage"] == {"prompt_tokens": 3, "total_tokens": 23, "completion_tokens": 20}
    assert elapsed >= (TTFT_MS + 19 * GAP_MS) / 1000  # sent when the last token is due
    truth = wait_truth(sim, "req-ns")
    assert truth["tokens"] == [20] and len(truth["send_ns"]) == 1

    body = {"prompt": "a b", "max_completion_tokens": 3, "ignore_eos": True, "stream": False}
    data = json.loads(exchange(sim, "POST", "/v1/completions", body).body)
    assert data["object"] == "text_completion"
    assert data["choices"][0]["text"] == vocab_text(3)
    assert data["usage"]["completion_tokens"] == 3


def test_natural_length_min_tokens_and_max_tokens(sim: SimProcess) -> None:
    def completion(**fields: Any) -> tuple[int, str]:
        data = json.loads(exchange(sim, "POST", "/v1/chat/completions", chat_body(**fields)).body)
        return data["usage"]["completion_tokens"], data["choices"][0]["finish_reason"]

    assert completion(max_tokens=50) == (5, "stop")  # --natural-tokens 5
    assert completion(max_tokens=50, min_tokens=8) == (8, "stop")
    assert completion(max_tokens=3) == (3, "length")
    assert completion(max_tokens=50, ignore_eos=True) == (50, "length")


def test_errors(sim: SimProcess) -> None:
    response = exchange(sim, "POST", "/v1/chat/completions", b"{not json")
    assert response.status == 400
    error = json.loads(response.body)["error"]
    assert error["type"] == "BadRequestError" and error["code"] == 400
    assert isinstance(error["message"], str)
    body = chat_body(max_tokens=0)
    assert exchange(sim, "POST", "/v1/chat/completions", body).status == 400
    assert exchange(sim, "GET", "/v1/nope").status == 404
    misspelt = exchange(sim, "POST", "/v1/chat/completions", chat_body(model="tpot-sin"))
    assert misspelt.status == 404
    assert json.loads(misspelt.body)["error"]["message"] == "The model `tpot-sin` does not exist."
    response = exchange(sim, "GET", "/v1/chat/completions")
    assert response.status == 405
    assert response.headers["allow"] == "POST"
    with socket.create_connection((sim.host, sim.port), timeout=5) as sock:
        sock.sendall(b"GARBAGE\r\n\r\n")
        with sock.makefile("rb") as f:
            assert read_response(f).status == 400
            assert f.read() == b""  # closed after a framing error


def test_keep_alive_pipelining_and_close(sim: SimProcess) -> None:
    conn = http.client.HTTPConnection(sim.host, sim.port, timeout=5)
    bodies = [chat_body(max_tokens=2, ignore_eos=True, stream=s) for s in (True, False)]
    conn.request("POST", "/v1/chat/completions", json.dumps(bodies[0]))
    first = conn.getresponse()
    assert b"[DONE]" in first.read()
    sock = conn.sock
    conn.request("POST", "/v1/chat/completions", json.dumps(bodies[1]))
    second = conn.getresponse()
    assert json.loads(second.read())["usage"]["completion_tokens"] == 2
    assert conn.sock is sock  # the same connection served both
    conn.close()

    with socket.create_connection((sim.host, sim.port), timeout=5) as sock:
        both = request_bytes("POST", "/v1/completions", {"prompt": "x", "max_tokens": 2})
        both += request_bytes("GET", "/health", headers={"Connection": "close"})
        sock.sendall(both)  # pipelined: answered in order, then closed as asked
        with sock.makefile("rb") as f:
            assert json.loads(read_response(f).body)["object"] == "text_completion"
            last = read_response(f)
            assert last.status == 200 and last.headers["connection"] == "close"
            assert f.read() == b""


def test_client_disconnect_is_recorded_as_aborted(sim: SimProcess) -> None:
    body = chat_body(max_tokens=5000, ignore_eos=True, stream=True)
    with socket.create_connection((sim.host, sim.port), timeout=5) as sock:
        sock.sendall(request_bytes("POST", "/v1/chat/completions", body, {"X-Request-Id": "gone"}))
        with sock.makefile("rb") as f:
            for _ in range(30):
                f.readline()
    truth = wait_truth(sim, "gone")
    assert truth["aborted"] is True
    assert 0 < truth["completion_tokens"] < 5000
    assert len(truth["send_ns"]) == truth["completion_tokens"]


def test_sigterm_flushes_truth_and_ready_file(tmp_path: Path) -> None:
    truth, ready = tmp_path / "t.jsonl", tmp_path / "ready.url"
    sim = start_simulator("--ttft-ms", "1", "--ready-file", str(ready), truth=truth)
    try:
        assert ready.read_text().strip() == sim.url
        body = {"prompt": "x", "max_tokens": 1, "ignore_eos": True}
        assert (
            exchange(sim, "POST", "/v1/completions", body, **{"X-Request-Id": "done"}).status == 200
        )
        sock = socket.create_connection((sim.host, sim.port), timeout=5)
        stream = chat_body(max_tokens=100000, ignore_eos=True, stream=True)
        sock.sendall(
            request_bytes("POST", "/v1/chat/completions", stream, {"X-Request-Id": "open"})
        )
        sock.recv(4096)
    finally:
        assert sim.stop() == 0
    sock.close()
    records = {r["request_id"]: r for r in read_truth(truth)}
    assert records["done"]["aborted"] is False
    assert records["open"]["aborted"] is True


# -- units ---------------------------------------------------------------------------------------


def test_a_request_arrives_when_its_first_bytes_do(tmp_path: Path) -> None:
    """The truth's arrival (where its TTFT starts) is the kernel's stamp of the read that
    brought the request's first bytes, not when the whole body was read and parsed: a head
    sent 50 ms before its body arrives at the head (as the client's TTFT starts at its send)."""
    truth = tmp_path / "truth.jsonl"
    body = {
        "model": "tpot-sim",
        "stream": True,
        "max_tokens": 2,
        "messages": [{"role": "user", "content": "hi"}],
    }
    message = request_bytes("POST", "/v1/chat/completions", body, {"X-Request-Id": "split"})
    head, _, payload = message.partition(b"\r\n\r\n")
    with start_simulator("--gap-ms", "1", "--ttft-ms", "1", truth=truth) as sim:
        host, port = sim.url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port))) as sock:
            sent_ns = time.time_ns()
            sock.sendall(head + b"\r\n\r\n")
            time.sleep(0.05)
            sock.sendall(payload)
            sock.settimeout(10)
            received = b""
            while b"[DONE]" not in received:
                received += sock.recv(65536)
    (record,) = [json.loads(line) for line in truth.read_text().splitlines() if '"split"' in line]
    assert 0 <= (record["arrival_ns"] - sent_ns) / 1e6 < 5, (record["arrival_ns"] - sent_ns) / 1e6


def _read_with_kernel_stamps(sim: SimProcess, request_id: str) -> list[tuple[bytes, int]]:
    """One 20-token stream read raw: each read's bytes and its kernel receive stamp."""
    body = {
        "model": "tpot-sim",
        "stream": True,
        "max_tokens": 20,
        "ignore_eos": True,
        "messages": [{"role": "user", "content": "hi"}],
    }
    received: list[tuple[bytes, int]] = []
    host, port = sim.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port))) as sock:
        enable_kernel_stamps(sock)
        sock.sendall(
            request_bytes("POST", "/v1/chat/completions", body, {"X-Request-Id": request_id})
        )
        sock.settimeout(10)
        while not received or b"[DONE]" not in received[-1][0]:
            data, ancillary, _, _ = sock.recvmsg(65536, ANCILLARY_BYTES)
            stamp = kernel_wall_ns(ancillary)
            assert stamp is not None
            received.append((data, stamp))
    return received


def _send_errors_us(received: list[tuple[bytes, int]], record: dict[str, Any]) -> list[float]:
    """Each read's kernel receive stamp minus the truth's send of the last token it brought
    (a read's stamp is its newest segment's), in us."""
    wall_minus_truth = time.time_ns() - time.perf_counter_ns() - record["perf_offset_ns"]
    errors_us, tokens = [], 0
    for data, stamp in received:
        tokens += data.count(b'"content":"') - data.count(b'"content":""')  # not the opening
        if tokens:
            errors_us.append((stamp - record["send_ns"][tokens - 1] - wall_minus_truth) / 1e3)
    assert tokens == 20
    return errors_us


def test_a_token_is_sent_when_the_kernel_sent_it(tmp_path: Path) -> None:
    """The truth's send stamps are the kernel's transmit stamps of the segments that carried
    each token (``kernel_sends`` counts them), a few microseconds before the client's kernel
    receive stamps, not when the simulator's loop got round to writing.

    A write whose stamp is not back at once, or falls outside its call (TCP sent it later),
    keeps the loop's stamp by design; on 2 busy cores that happened to half of one stream's
    tokens. So a stream is tried up to 5 times and one must be (nearly) all kernel-stamped:
    were the kernel's stamps never used, every try fails."""
    tries = []
    for attempt in range(5):
        truth = tmp_path / f"truth-{attempt}.jsonl"
        with start_simulator("--gap-ms", "5", "--ttft-ms", "5", truth=truth) as sim:
            received = _read_with_kernel_stamps(sim, "sent")
        (record,) = [r for r in read_truth(truth) if r["request_id"] == "sent"]
        assert len(record["send_ns"]) == 20
        errors_us = _send_errors_us(received, record)
        tries.append((record["kernel_sends"], errors_us))
        if record["kernel_sends"] >= 18 and all(-20 <= error <= 200 for error in errors_us):
            return
    pytest.fail(f"no stream of 5 kept the kernel's stamps (kernel_sends, errors us): {tries}")


def test_loop_sends_keep_the_loops_stamps(tmp_path: Path) -> None:
    """``--truth-loop-sends`` (to compare): no transmit stamp is kept."""
    truth = tmp_path / "truth.jsonl"
    body = {
        "model": "tpot-sim",
        "stream": True,
        "max_tokens": 5,
        "ignore_eos": True,
        "messages": [{"role": "user", "content": "hi"}],
    }
    with start_simulator(
        "--gap-ms", "1", "--ttft-ms", "1", "--truth-loop-sends", truth=truth
    ) as sim:
        assert (
            exchange(sim, "POST", "/v1/chat/completions", body, **{"X-Request-Id": "loop"}).status
            == 200
        )
    (record,) = [r for r in read_truth(truth) if r["request_id"] == "loop"]
    assert record["kernel_sends"] == 0 and len(record["send_ns"]) == 5
