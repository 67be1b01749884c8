"""TTFT overhead: our measured TTFT minus the server's true TTFT, per request.

Usage: python benchmarks/ttft_overhead.py [--quick] [--streams 1,16,64] [--seconds 5]
                                          [--ttft-ms 20] [--gap-ms 2] [--tokens 8]
                                          [--modes ours,ours-greenlet] [--no-pin]

The simulator answers with a fixed TTFT; its truth gives, per request, when it had the
request (``arrival_ns``) and when it wrote the first token (``send_ns[0]``): true TTFT =
send_ns[0] - arrival_ns. Ours = first token event's arrival stamp - t_send (taken just
before the request is written). The difference is what the client adds: the request's
and the first chunk's trips through loopback and the two event loops, and any delay in
stamping. Short requests (``--tokens``, +-50 %) back to back on each stream; with ``reuse`` each
stream keeps one keep-alive connection (its first request, which opens it while every other
stream opens its own, is left out), with ``new`` every request opens (and closes) one.
Columns:
  TTFT p50/p99        ours / true, ms
  overhead p50/p99/max  ours - true per request, ms
  of it: stamp p99    the response side: our first token's stamp - the server's write of
                      it (how late we stamped it)
  of it: request p99  the request side: t_send -> the server's parse of the request (the
                      overhead less the stamp part: loopback, and the server reading late)
  CPU %, req/s        this client's CPU (one core = 100 %) and requests per second
  call->send p50/p99  from the start of the request call to t_send (building the request
                      and, with ``new``, the TCP connect: not part of TTFT, paid all the same)
  sim                 the simulator's CPU + run-queue wait share ('S': saturated)
"""

from __future__ import annotations

from gevent import monkey

monkey.patch_all()

import numpy as np  # noqa: E402
from clients import MODES  # noqa: E402
from common import run_case  # noqa: E402
from output import Table, add_pin_argument, base_parser, parse_list, print_header  # noqa: E402
from probes import pinning_note, set_pinning  # noqa: E402


def pct_ms(values_ns: np.ndarray, percentile: float) -> str:
    if not values_ns.size:
        return "-"
    return f"{np.percentile(values_ns, percentile) / 1e6:.3f}"


def main() -> None:
    parser = base_parser(__doc__)
    parser.add_argument("--streams", default="1,16,64")
    parser.add_argument("--seconds", type=float, default=5.0, help="streaming time per case")
    parser.add_argument("--ttft-ms", type=float, default=20.0, help="the simulator's TTFT")
    parser.add_argument("--gap-ms", type=float, default=2.0)
    parser.add_argument("--tokens", type=int, default=8, help="output tokens per request")
    parser.add_argument("--modes", default="ours", help=f"any of {','.join(MODES)}")
    add_pin_argument(parser)
    args = parser.parse_args()
    set_pinning(not args.no_pin)
    if args.quick:
        args.seconds = 2.0
    print_header(
        "TTFT overhead: measured - true TTFT, one client process",
        [
            f"simulator TTFT {args.ttft_ms:g} ms, {args.tokens} tokens at {args.gap_ms:g} ms, "
            f"{args.seconds:g} s per case",
            pinning_note(),
        ],
    )
    table = Table(
        [
            "streams",
            "mode",
            "connection",
            "requests",
            "TTFT p50 ours/true",
            "p99 ours/true",
            "overhead p50",
            "p99",
            "max",
            "of it: stamp p99",
            "of it: request p99",
            "call->send p50",
            "p99",
            "CPU %",
            "req/s",
            "wait %",
            "sim",
        ]
    )
    modes = parse_list(args.modes, str)
    cases = [
        (streams, mode, new_connection)
        for streams in parse_list(args.streams)
        for new_connection in (False, True)
        for mode in modes
    ]
    for streams, mode, new_connection in cases:
        case = run_case(
            gap_ms=args.gap_ms,
            streams=streams,
            tokens=args.tokens,
            duration_s=args.seconds,
            ttft_ms=args.ttft_ms,
            mode=mode,
            new_connection=new_connection,
        )
        # reuse: a stream's first request opens its connection (all streams at once); it
        # is the "new" rows' case, so it is left out of the reuse rows
        kept = case.sequence >= (0 if new_connection else 1)
        overhead, late = case.ttft_overhead_ns[kept], case.first_stamp_late_ns[kept]
        measured, true = case.ttft_measured_ns[kept], case.ttft_true_ns[kept]
        table.row(
            streams,
            mode,
            "new" if new_connection else "reuse",
            overhead.size,
            f"{pct_ms(measured, 50)} / {pct_ms(true, 50)}",
            f"{pct_ms(measured, 99)} / {pct_ms(true, 99)}",
            pct_ms(overhead, 50),
            pct_ms(overhead, 99),
            pct_ms(overhead, 100),
            pct_ms(late, 99),
            pct_ms(overhead - late, 99),
            pct_ms(case.connect_ns[kept], 50),
            pct_ms(case.connect_ns[kept], 99),
            f"{case.cpu_percent:.0f}",
            round(case.ttft_overhead_ns.size / case.run.window_s),
            f"{case.wait_percent:.0f}",
            case.sim_cell,
        )


if __name__ == "__main__":
    main()
