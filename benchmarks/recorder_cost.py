"""Recorder cost: CPU per finished request and per token event, by request length.

Usage: python benchmarks/recorder_cost.py [--quick] [--tokens 8,64,256] [--requests 2000]

One process feeds synthetic finished requests (``synthetic.synthetic_timings``: one-token
events, log-normal gaps around 5 ms, per-event values as ``array("q")`` like a stream's)
through ``Recorder.record`` and ships a delta (``take_interval(final=True)`` + ``encode``)
every 200 requests, as a worker does each second: everything the recorder spends on a
request after the stream ended (samples, phase tagging, bucketing, encoding), no I/O.
Each request also opens and closes its prefill window (``Recorder.on_prefill``, as a
user's ``prefill_window`` events do), so its gaps are tagged with causes ("Why the tail");
a recorder without ``on_prefill`` (a version before it) is fed without. Columns: us of CPU
(``process_time``) per request and per token event, best of three rounds (this VM's noise
is one-sided).
"""

from __future__ import annotations

import time
from array import array

import numpy as np
from output import Table, base_parser, parse_list, print_header
from synthetic import synthetic_timings

from tpot_locust.metrics.recorder import Recorder

REPORT_EVERY = 200
ROUNDS = 3


def cpu_per_request_s(tokens: int, requests: int) -> float:
    rng = np.random.default_rng(1)
    finished = []
    for index in range(requests):
        timings = synthetic_timings(rng, index, tokens, "chat")
        timings.token_stamps = array("q", timings.token_stamps)
        timings.token_counts = array("q", timings.token_counts)
        finished.append(timings)
    recorder = Recorder()
    windows = getattr(recorder, "on_prefill", None)
    start = time.process_time()
    for number, timings in enumerate(finished, 1):
        if windows is not None:
            windows(timings.request_id, timings.t_send_ns, None, 256)
            windows(timings.request_id, timings.t_send_ns, timings.token_stamps[0], 256)
        recorder.record(timings)
        if number % REPORT_EVERY == 0:
            recorder.take_interval(final=True).encode()
    recorder.take_interval(final=True).encode()
    return (time.process_time() - start) / requests


def main() -> None:
    parser = base_parser(__doc__)
    parser.add_argument("--tokens", default="8,64,256", help="token events per request")
    parser.add_argument("--requests", type=int, default=2000)
    args = parser.parse_args()
    if args.quick:
        args.requests = 400
    print_header("Recorder cost per finished request", [f"{args.requests} requests per row"])
    table = Table(["tokens", "us per request", "us per event"])
    for tokens in parse_list(args.tokens):
        best = min(cpu_per_request_s(tokens, args.requests) for _ in range(ROUNDS))
        table.row(tokens, best * 1e6, best * 1e6 / tokens)


if __name__ == "__main__":
    main()
