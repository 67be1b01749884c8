"""Kernel receive stamps: a read that comes late still carries the data's arrival time."""

from __future__ import annotations

import json
import ssl
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from tpot_locust.common.clock import KERNEL_CLOCK, SEGMENT_CLOCK, USER_CLOCK, from_perf_ns, stamp_ns
from tpot_locust.sim.process import start_simulator
from tpot_locust.wire.http_client import HTTPConnection, Origin
from tpot_locust.wire.segment_stamps import process_tap
from tpot_locust.wire.sse import SSEParser
from tpot_locust.wire.stream_decoder import decode_events

GAP_MS = 50
# Each read starts this long after the previous one returned: tokens 2-4 wait 10, 20, 30 ms
# in the socket, and the next token is still 40, 30, 20 ms away (one token per read).
LATE_MS = 60


def stamped_tokens(url: str, clock: str) -> tuple[Sequence[int], str, Sequence[int]]:
    """Stream 4 tokens, reading each one late; the token stamps, the request id and the
    connection's read delays."""
    connection = HTTPConnection(Origin.parse(url), clock=clock)
    messages = [{"role": "user", "content": "hi"}]
    body = {"model": "tpot-sim", "stream": True, "max_tokens": 4, "messages": messages}
    request_id = f"stamps-{clock}"
    headers = {"Content-Type": "application/json", "X-Request-Id": request_id}
    response, _ = connection.request(
        "POST", "/v1/chat/completions", headers, json.dumps(body).encode()
    )
    parser = SSEParser()
    stamps: list[int] = []
    payloads: list[bytes] = []

    def consume(stamp: int, data: bytes) -> None:
        for payload in parser.feed(data):
            stamps.append(stamp)
            payloads.append(payload)
        time.sleep(LATE_MS / 1000)  # a busy event loop: the next token waits in the socket

    response.read_into(consume)
    connection.close()
    decoded = decode_events(stamps, payloads, "chat")
    assert decoded.error is None and decoded.output_tokens == 4
    return decoded.token_stamps, request_id, connection.read_delays_ns


def true_sends(truth: Path, request_id: str) -> list[int]:
    for line in truth.read_text().splitlines():
        record = json.loads(line)
        if record["request_id"] == request_id:
            return [from_perf_ns(send - record["perf_offset_ns"]) for send in record["send_ns"]]
    raise AssertionError(f"no truth for {request_id}")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="SO_TIMESTAMPNS is Linux's")
def test_kernel_stamps_carry_arrival_time_of_late_reads(tmp_path: Path) -> None:
    truth = tmp_path / "truth.jsonl"
    with start_simulator(  # the truth file is complete once the simulator has stopped
        "--gap-ms", str(GAP_MS), "--ttft-ms", "5", truth=truth
    ) as sim:
        kernel, kernel_id, _ = stamped_tokens(sim.url, KERNEL_CLOCK)
        user, user_id, _ = stamped_tokens(sim.url, USER_CLOCK)
    kernel_error_ms = [
        (s - t) / 1e6 for s, t in zip(kernel, true_sends(truth, kernel_id), strict=True)
    ]
    user_error_ms = [(s - t) / 1e6 for s, t in zip(user, true_sends(truth, user_id), strict=True)]
    # The kernel stamps the data as it arrives: within the machine's loopback delay. A read
    # that (on a very slow machine) held two tokens carries the later one's arrival: only
    # the last token of each read is held to that.
    last_of_read = [i == len(kernel) - 1 or kernel[i] != kernel[i + 1] for i in range(len(kernel))]
    checked = [error for error, last in zip(kernel_error_ms, last_of_read, strict=True) if last]
    assert all(-1 <= error <= 5 for error in checked), kernel_error_ms
    # the user clock stamps the late reads late (what the kernel stamps spare us)
    assert all(error >= 5 for error in user_error_ms[1:]), user_error_ms


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="SO_TIMESTAMPNS is Linux's")
def test_read_delay_is_how_long_the_data_waited_in_the_socket() -> None:
    """A read's delay (our clock at the read - the kernel's stamp) is how long its token
    waited: ~10, 20 and 30 ms for tokens 2-4 here. Reads on the user clock have no such
    measure and report none (rather than zeros)."""
    with start_simulator("--gap-ms", str(GAP_MS), "--ttft-ms", "5") as sim:
        _, _, kernel_delays = stamped_tokens(sim.url, KERNEL_CLOCK)
        _, _, user_delays = stamped_tokens(sim.url, USER_CLOCK)
    delays_ms = [delay / 1e6 for delay in kernel_delays]
    assert all(delay >= 0 for delay in delays_ms), delays_ms
    for waited_ms in (10, 20, 30):  # a sleep may overshoot on a loaded machine
        assert any(waited_ms - 2 <= delay <= waited_ms + 8 for delay in delays_ms), delays_ms
    assert len(user_delays) == 0


def held_reader_stamps(
    url: str, clock: str, hold_ms: float, tls: ssl.SSLContext | None = None
) -> tuple[list[int], str]:
    """Stream 12 tokens 5 ms apart with the reader held ``hold_ms`` after its first read,
    so that the next tokens wait in the socket together; the token stamps and request id."""
    connection = HTTPConnection(Origin.parse(url), clock=clock, tls_context=tls)
    body = {
        "model": "tpot-sim",
        "stream": True,
        "max_tokens": 12,
        "messages": [{"role": "user", "content": "hi"}],
    }
    request_id = f"held-{clock}"
    headers = {"Content-Type": "application/json", "X-Request-Id": request_id}
    response, _ = connection.request(
        "POST", "/v1/chat/completions", headers, json.dumps(body).encode()
    )
    parser, stamps, payloads, held = SSEParser(), [], [], []

    def consume(stamp: int, data: bytes) -> None:
        for payload in parser.feed(data):
            stamps.append(stamp)
            payloads.append(payload)
        if not held:
            held.append(True)
            time.sleep(hold_ms / 1000)

    response.read_into(consume)
    assert connection.request_clock == clock, connection.request_clock
    connection.close()
    decoded = decode_events(stamps, payloads, "chat")
    assert decoded.error is None and decoded.output_tokens == 12
    return list(decoded.token_stamps), request_id


@pytest.mark.skipif(process_tap() is None, reason="no segment tap here (needs CAP_NET_RAW)")
def test_segment_stamps_recover_every_token_a_held_reader_left_waiting(tmp_path: Path) -> None:
    """Kernel stamps alone give every token that waited the newest one's stamp (the kernel
    merges waiting segments); the segment tap gives each its own arrival."""
    truth = tmp_path / "truth.jsonl"
    with start_simulator("--gap-ms", "5", "--ttft-ms", "5", truth=truth) as sim:
        segment, segment_id = held_reader_stamps(sim.url, SEGMENT_CLOCK, 40)
        kernel, kernel_id = held_reader_stamps(sim.url, KERNEL_CLOCK, 40)
    segment_error_ms = [
        (s - t) / 1e6 for s, t in zip(segment, true_sends(truth, segment_id), strict=True)
    ]
    assert all(-0.5 <= error <= 1.0 for error in segment_error_ms), segment_error_ms
    assert len(set(segment)) == len(segment)  # no two tokens share a stamp
    assert len(set(kernel)) <= len(kernel) - 4, kernel  # the held-up ones shared one


@pytest.mark.skipif(process_tap() is None, reason="no segment tap here (needs CAP_NET_RAW)")
def test_a_request_leaves_when_the_tap_saw_it_leave(tmp_path: Path) -> None:
    """Our TTFT starts when the request's first segment left (the tap's copy of it), as the
    simulator's true TTFT starts when it arrived (its kernel receive stamp): the two agree
    to microseconds, where the stamp taken before the send was 15-30 us early (the send's
    own path, and any hold of the client between the stamp and the send)."""
    truth = tmp_path / "truth.jsonl"
    sends: dict[str, tuple[int, int]] = {}  # request id -> (stamp before the send, departure)
    with start_simulator("--gap-ms", "1", "--ttft-ms", "2", truth=truth) as sim:
        connection = HTTPConnection(Origin.parse(sim.url), clock=SEGMENT_CLOCK)
        body = json.dumps(
            {
                "model": "tpot-sim",
                "stream": True,
                "max_tokens": 2,
                "messages": [{"role": "user", "content": "hi"}],
            }
        ).encode()
        for index in range(20):
            headers = {"Content-Type": "application/json", "X-Request-Id": f"left-{index}"}
            before_ns = stamp_ns()
            response, left_ns = connection.request("POST", "/v1/chat/completions", headers, body)
            response.read_into(lambda stamp, data: None)
            sends[f"left-{index}"] = (before_ns, left_ns)
        connection.close()
    errors_us = []
    for line in truth.read_text().splitlines():
        record = json.loads(line)
        before_ns, left_ns = sends[record["request_id"]]
        arrival_ns = from_perf_ns(record["arrival_ns"] - record["perf_offset_ns"])
        assert before_ns <= left_ns < arrival_ns + 50_000, (before_ns, left_ns, arrival_ns)
        errors_us.append((arrival_ns - left_ns) / 1e3)
    assert len(errors_us) == 20
    assert sorted(abs(error) for error in errors_us)[10] <= 12, errors_us  # the median
    assert all(abs(error) <= 100 for error in errors_us), errors_us
