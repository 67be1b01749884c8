"""Client CPU per token event, and ITL error against ground truth, in one gevent process.

Usage: python benchmarks/client_cpu.py [--gap-ms 1] [--streams 1,16,64] [--tokens 500]

Each stream is a greenlet sending requests back to back with ``stream_request`` (the path
``ChatUser`` uses) and recording them with the ``Recorder``; CPU is this process's
``time.process_time`` over the streaming phase, so it includes socket reads, SSE parsing,
JSON decoding after the stream and histogram recording. The simulator runs in its own
process. Prints one table; no pass/fail.
"""

from __future__ import annotations

from gevent import monkey

monkey.patch_all()

import argparse  # noqa: E402
import json  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import gevent  # noqa: E402
import numpy as np  # noqa: E402

from tpot_locust.http_client import HTTPConnection, Origin  # noqa: E402
from tpot_locust.recorder import Recorder  # noqa: E402
from tpot_locust.sim.process import start_simulator  # noqa: E402
from tpot_locust.streaming import StreamRequest, stream_request  # noqa: E402


def run_case(url: str, streams: int, tokens: int, requests_per_stream: int) -> dict:
    recorder = Recorder()
    measured: dict[str, np.ndarray] = {}

    def one_stream(index: int) -> None:
        connection = HTTPConnection(Origin.parse(url))
        for number in range(requests_per_stream):
            request_id = f"s{streams}-{index}-{number}"
            body = {"model": "tpot-sim", "stream": True, "max_tokens": tokens,
                    "ignore_eos": True, "stream_options": {"include_usage": True},
                    "messages": [{"role": "user", "content": "hello " * 32}]}  # fmt: skip
            request = StreamRequest(
                user_class="bench", api="chat", request_id=request_id,
                path="/v1/chat/completions",
                headers={"Content-Type": "application/json", "X-Request-Id": request_id},
                body=json.dumps(body).encode(), prompt_tokens_requested=32,
                first_token_timeout=30, idle_timeout=30, total_timeout=120,
                t_intended_ns=time.perf_counter_ns(),
            )  # fmt: skip
            timings, _ = stream_request(connection, request)
            recorder.record(timings)
            measured[request_id] = np.asarray(timings.token_stamps, dtype=np.int64)
        connection.close()

    cpu0, wall0 = time.process_time(), time.perf_counter()
    gevent.joinall([gevent.spawn(one_stream, i) for i in range(streams)])
    recorder.take_interval()
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    events = sum(stamps.size for stamps in measured.values())
    return {"measured": measured, "cpu": cpu, "wall": wall, "events": events}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gap-ms", type=float, default=1.0)
    parser.add_argument("--streams", default="1,16,64")
    parser.add_argument("--tokens", type=int, default=500)
    parser.add_argument("--requests", type=int, default=3, help="requests per stream")
    args = parser.parse_args()
    print(f"gap {args.gap_ms} ms, {args.tokens} tokens per request, one client process")
    header = f"{'streams':>8}{'events/s':>10}{'CPU us/ev':>11}{'CPU %':>7}{'ITL p50 err':>13}"
    print(header + f"{'ITL p99 err':>13}{'coalesced':>11}{'truth coal.':>12}")
    with tempfile.TemporaryDirectory() as folder:
        for streams in (int(s) for s in args.streams.split(",")):
            truth_path = Path(folder) / f"truth-{streams}.jsonl"
            with start_simulator("--gap-ms", str(args.gap_ms), "--ttft-ms", "5",
                                 truth=truth_path) as sim:  # fmt: skip
                result = run_case(sim.url, streams, args.tokens, args.requests)
            truth = {}
            for line in truth_path.read_text().splitlines():
                entry = json.loads(line)
                truth[entry["request_id"]] = np.asarray(entry["send_ns"], dtype=np.int64)
            measured_gaps = np.concatenate([np.diff(s) for s in result["measured"].values()])
            true_gaps = np.concatenate([np.diff(truth[r]) for r in result["measured"]])
            p50 = abs(np.percentile(measured_gaps, 50) - np.percentile(true_gaps, 50)) / 1e6
            p99 = abs(np.percentile(measured_gaps, 99) - np.percentile(true_gaps, 99)) / 1e6
            coalesced = np.count_nonzero(measured_gaps < 100_000) / measured_gaps.size
            true_coalesced = np.count_nonzero(true_gaps < 100_000) / true_gaps.size
            print(f"{streams:>8}{result['events'] / result['wall']:>10.0f}"
                  f"{result['cpu'] / result['events'] * 1e6:>11.1f}"
                  f"{100 * result['cpu'] / result['wall']:>7.0f}"
                  f"{p50:>10.3f} ms{p99:>10.3f} ms{100 * coalesced:>10.1f}%"
                  f"{100 * true_coalesced:>11.1f}%")  # fmt: skip


if __name__ == "__main__":
    main()
