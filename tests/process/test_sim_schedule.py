"""The simulator says where it fell behind its own schedule: a token event that left over
``LATE_AFTER_NS`` after it was due is in its truth line's ``late_us`` (event index,
microseconds late), in gap mode (its place on the model's grid) and in engine mode (its
step's scheduled end). A real simulator is held (SIGSTOP) in the middle of a stream."""

from __future__ import annotations

import signal
import socket
import threading
import time
from typing import Any

import pytest

from tests.helpers.raw_http import request_bytes
from tpot_locust.common.sim_schedule import LATE_AFTER_NS
from tpot_locust.sim.process import SimProcess, start_simulator

GAP_MS, TTFT_MS, TOKENS, HOLD_S = 2.0, 5.0, 150, 0.06
ENGINE = [
    "--profile",
    "h200-llama3-8b",
    "--set",
    f"step_base_ms={GAP_MS:g}",
    *[
        part
        for key in ("decode_ms_per_seq", "kv_read_ms_per_ktoken", "step_jitter", "stall_prob")
        for part in ("--set", f"{key}=0")
    ],
]


def stream_held(sim: SimProcess, request_id: str) -> dict[str, Any]:
    """One streamed answer of TOKENS tokens, the simulator held HOLD_S in its middle: its
    truth line."""
    body = {
        "model": "tpot-sim",
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": TOKENS,
        "ignore_eos": True,
        "stream": True,
    }
    received = bytearray()
    with socket.create_connection((sim.host, sim.port), timeout=10) as sock:
        sock.sendall(
            request_bytes(
                "POST",
                "/v1/chat/completions",
                body,
                {"X-Request-Id": request_id, "Connection": "close"},
            )
        )

        def read() -> None:
            while data := sock.recv(65536):
                received.extend(data)

        reader = threading.Thread(target=read)
        reader.start()
        time.sleep(0.12)  # some 50 events in
        sim.process.send_signal(signal.SIGSTOP)
        time.sleep(HOLD_S)
        sim.process.send_signal(signal.SIGCONT)
        reader.join(10)
    assert b"data: [DONE]" in received
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        for record in sim.read_truth():
            if record.get("request_id") == request_id:
                return record
        time.sleep(0.05)
    raise AssertionError(f"no truth line for {request_id}")


@pytest.mark.parametrize("mode", ["gap", "engine"])
def test_a_held_simulator_says_which_events_left_late(tmp_path, mode: str) -> None:
    args = ["--gap-ms", f"{GAP_MS:g}", "--ttft-ms", f"{TTFT_MS:g}"] if mode == "gap" else ENGINE
    with start_simulator(*args, truth=tmp_path / "truth.jsonl") as sim:
        record = stream_held(sim, f"held-{mode}")
    sends, late = record["send_ns"], record["late_us"]
    assert len(sends) == TOKENS
    indices = [index for index, _ in late]
    assert indices == sorted(set(indices)) and all(0 <= i < TOKENS for i in indices)
    assert all(us * 1000 > LATE_AFTER_NS for _, us in late)
    # the hold made a run of late events: the first out after it was due ~HOLD_S before
    assert HOLD_S * 0.6e6 <= max(us for _, us in late) <= HOLD_S * 3e6
    held = [i for i, us in late if us * 1000 > 10 * LATE_AFTER_NS]
    if mode == "engine":
        # the step in flight went out when the engine woke, the next one started then (a
        # stalled engine: one long gap, no catch-up steps)
        assert len(held) == 1
        return
    # gap mode, fixed gaps: each event was due at arrival + TTFT + index x gap; the truth's
    # lateness is exactly its send stamp's distance from there, and only the late ones say so
    lateness = dict(late)
    for index, sent in enumerate(sends):
        due = record["arrival_ns"] + round((TTFT_MS + index * GAP_MS) * 1e6)
        if index in lateness:
            assert abs(lateness[index] * 1000 - (sent - due)) < 50_000, index
        else:
            assert sent - due <= LATE_AFTER_NS + 50_000, index
    # the events due while it was held went out together, in one write, when it woke
    assert len(held) >= HOLD_S * 0.5e3 / GAP_MS
    assert len({sends[i] for i in held}) <= 2
