"""How exact the simulator's truth is: each token's arrival minus its true send, per truth clock.

Usage: python benchmarks/truth_noise.py [--quick] [--requests 30] [--tokens 200] [--gap-ms 1]
                                        [--no-hog]

For each way the simulator stamps its sends (``kernel``: the transmit stamp of the token's
segment, the default; ``loop``: ``--truth-loop-sends``, the loop's stamp just before the
write), one stream reads ``--requests`` answers one after the other on the segment clock
(the kernel clock where this process has no tap) and compares each token's arrival with its
true send. With a hog (the default) a busy loop shares the simulator's core (CPU 0; the
client runs on CPU 1), so that the simulator is often held between its stamp and its write:
what the kernel's stamp removes. Columns: tokens compared, the truth's events the kernel
stamped, and arrival minus truth (ms) at P50, P99, P99.9 and max.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from output import Table, base_parser, print_header

from tpot_locust.common.clock import from_perf_ns
from tpot_locust.sim.process import start_simulator
from tpot_locust.sim.truth import read_truth
from tpot_locust.wire.http_client import HTTPConnection, Origin
from tpot_locust.wire.segment_stamps import arrival_clock
from tpot_locust.wire.sse import SSEParser
from tpot_locust.wire.stream_decoder import decode_events

TRUTH_CLOCKS = {"kernel": (), "loop": ("--truth-loop-sends",)}


def token_stamps(url: str, request_id: str, tokens: int) -> list[int]:
    """One streamed answer of ``tokens`` tokens, read at once; each token's stamp."""
    connection = HTTPConnection(Origin.parse(url), clock=arrival_clock())
    body = {
        "model": "tpot-sim",
        "stream": True,
        "max_tokens": tokens,
        "ignore_eos": True,
        "messages": [{"role": "user", "content": "hi"}],
    }
    headers = {"Content-Type": "application/json", "X-Request-Id": request_id}
    response, _ = connection.request(
        "POST", "/v1/chat/completions", headers, json.dumps(body).encode()
    )
    parser, stamps, payloads = SSEParser(), [], []

    def consume(stamp: int, data: bytes) -> None:
        for payload in parser.feed(data):
            stamps.append(stamp)
            payloads.append(payload)

    response.read_into(consume)
    connection.close()
    return list(decode_events(stamps, payloads, "chat").token_stamps)


def run_case(
    truth_clock: str, requests: int, tokens: int, gap_ms: float
) -> tuple[list[float], int]:
    """Arrival minus truth (ms) of every token, and the events the kernel stamped."""
    with tempfile.TemporaryDirectory() as folder:
        truth = Path(folder) / "truth.jsonl"
        args = ("--gap-ms", str(gap_ms), "--ttft-ms", "2", *TRUTH_CLOCKS[truth_clock])
        arrivals = {}
        with start_simulator(*args, truth=truth) as sim:
            if len(os.sched_getaffinity(0)) > 1:
                os.sched_setaffinity(sim.process.pid, {0})
            for index in range(requests):
                arrivals[f"noise-{index}"] = token_stamps(sim.url, f"noise-{index}", tokens)
        errors, kernel_sends = [], 0
        for record in read_truth(truth):
            measured = arrivals.get(record["request_id"])
            if measured is None:
                continue
            true = [from_perf_ns(send - record["perf_offset_ns"]) for send in record["send_ns"]]
            errors += [(a - t) / 1e6 for a, t in zip(measured, true, strict=True)]
            kernel_sends += record["kernel_sends"]
    return errors, kernel_sends


def main() -> None:
    parser = base_parser(__doc__)
    parser.add_argument("--requests", type=int, default=30)
    parser.add_argument("--tokens", type=int, default=200)
    parser.add_argument("--gap-ms", type=float, default=1.0)
    parser.add_argument("--no-hog", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.requests = 5
    cpus = sorted(os.sched_getaffinity(0))
    hog = None
    if len(cpus) > 1:
        os.sched_setaffinity(0, {cpus[-1]})
        if not args.no_hog:
            hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
            os.sched_setaffinity(hog.pid, {0})
    print_header(
        "truth noise: each token's arrival minus its true send, per truth clock",
        [
            f"{args.requests} answers of {args.tokens} tokens, {args.gap_ms:g} ms apart, read at "
            f"once on the {arrival_clock()} clock",
            f"simulator on CPU 0{' beside a busy loop' if hog else ''}, client on CPU {cpus[-1]}",
        ],
    )
    table = Table(["truth", "tokens", "kernel-stamped", "p50", "p99", "p99.9", "max"])
    try:
        for truth_clock in TRUTH_CLOCKS:
            errors, kernel_sends = run_case(truth_clock, args.requests, args.tokens, args.gap_ms)
            found = np.asarray(errors)
            table.row(
                truth_clock,
                found.size,
                kernel_sends,
                *(f"{np.percentile(found, p):.4f}" for p in (50, 99, 99.9)),
                f"{found.max():.4f}",
            )
    finally:
        if hog is not None:
            hog.kill()
            hog.wait()


if __name__ == "__main__":
    main()
