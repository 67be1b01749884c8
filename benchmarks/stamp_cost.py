"""What recovering every token's stamp costs: ours against the raw reader, one sitting.

Usage: python benchmarks/stamp_cost.py [--quick] [--streams 64,256] [--gap-ms 2] [--tokens 200]
                                       [--seconds 6] [--batch-ms 10,20,40] [--no-pin]
                                       [--clients floor,ours,ours-at-once,batched,ours-kernel]

For each stream count, four clients read the same kind of server (the simulator, its own
process, a fixed gap, answers of ``--tokens``): ``floor``, gevent's loop reading each ready
socket once and parsing nothing (``read_floor.py``'s gevent reader: the least any client
can spend); ``ours``, the package's hot path as installed (the ``segment`` clock: every
segment's own stamp, from the tap, where this process has ``CAP_NET_RAW``; bodies read in
40 ms batches after their first read, each end heard at once); ``ours-at-once``, the same
reading each socket as soon as it is ready (``TPOT_LOCUST_READ_BATCH_MS=0``);
``ours-batched-N``, reading in N ms batches (a row for each of ``--batch-ms``: the longer the
period, the more events a read holds, and the fewer reads and wake-ups an event pays for);
and ``ours-kernel``, the same on the kernel clock (``TPOT_LOCUST_STAMPS=kernel``: no tap,
never batched).
Columns: token events per second, requests per second (closed loop: a stream sends its next
request when it has read the end of the last, so a late-noticed end shows here), client CPU
microseconds per event (user + kernel; for ours less the lag probes' own CPU, measured idle
first, as ``accuracy.py`` does), that over the floor's, and for ours TPOT p99 and max
measured / true with the error (one token per event: TPOT is ITL).
"""

from __future__ import annotations

from gevent import monkey

monkey.patch_all()

from common import run_case  # noqa: E402
from output import Table, add_pin_argument, base_parser, ms, parse_list, print_header  # noqa: E402
from probes import pinning_note, set_pinning  # noqa: E402
from read_floor import run_case as floor_case  # noqa: E402

from tpot_locust.metrics.histograms import histogram_stats  # noqa: E402


def main() -> None:
    parser = base_parser(__doc__)
    parser.add_argument("--streams", default="64,256")
    parser.add_argument("--gap-ms", type=float, default=2.0)
    parser.add_argument("--tokens", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--batch-ms", default="40")
    parser.add_argument(
        "--clients",
        default="floor,ours,ours-at-once,batched,ours-kernel",
        help="the rows, in order (batched: one a --batch-ms)",
    )
    add_pin_argument(parser)
    args = parser.parse_args()
    set_pinning(not args.no_pin)
    if args.quick:
        args.streams, args.seconds = "64", 2.0
    print_header(
        "stamp cost: CPU per token event of ours (segment and kernel clocks) and the floor",
        [
            f"gap {args.gap_ms:g} ms, answers of {args.tokens} tokens (+-50 %) back to back, "
            f"{args.seconds:g} s per case",
            pinning_note(),
        ],
    )
    table = Table(
        [
            "streams",
            "client",
            "events/s",
            "req/s",
            "us/ev",
            "x floor",
            "TPOT p99 meas/true",
            "err",
            "max meas/true",
            "err",
        ]
    )
    idle = run_case(gap_ms=args.gap_ms, streams=0, tokens=1, duration_s=min(args.seconds, 3))
    for streams in parse_list(args.streams):
        floor_us = float("nan")
        batched = [f"ours-batched-{period:g}" for period in parse_list(args.batch_ms, float)]
        rows = [
            row
            for name in args.clients.split(",")
            if name
            for row in (batched if name == "batched" else [name])
        ]
        for client in rows:
            if client == "floor":
                rate, _, _, _, floor_us = floor_case("gevent", args.gap_ms, streams, args.seconds)
                table.row(
                    streams,
                    client,
                    f"{rate:,.0f}",
                    "-",
                    f"{floor_us:.1f}",
                    "1.00",
                    "-",
                    "-",
                    "-",
                    "-",
                )
                continue
            case = run_case(
                gap_ms=args.gap_ms,
                streams=streams,
                tokens=args.tokens,
                duration_s=args.seconds,
                mode=client,
            )
            us = case.net_us_per_event(idle)
            measured = histogram_stats(case.run.tpot, (99.0,))
            true = histogram_stats(case.true_tpot, (99.0,))
            p99, true_p99 = measured.percentiles[99.0] / 1000, true.percentiles[99.0] / 1000
            top, true_top = measured.max / 1000, true.max / 1000
            requests_per_s = len(case.run.sent) / case.run.window_s if case.run.window_s else 0
            table.row(
                streams,
                client,
                f"{case.events_per_s:,.0f}",
                f"{requests_per_s:.1f}",
                f"{us:.1f}",
                f"{us / floor_us:.2f}",
                f"{ms(p99)} / {ms(true_p99)}",
                f"{p99 - true_p99:+.3f}",
                f"{ms(top)} / {ms(true_top)}",
                f"{top - true_top:+.3f}",
            )


if __name__ == "__main__":
    main()
