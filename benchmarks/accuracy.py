"""Accuracy: measured vs true TPOT in ONE client process, at a fixed true gap and rising streams.

Usage: python benchmarks/accuracy.py [--quick] [--baseline | --both | --modes M,M] [--gaps 1,5]
                                     [--streams 1,16,64,256] [--seconds 6] [--tokens 256]
                                     [--server independent|engine] [--fixed-length] [--no-pin]

Each case starts the simulator (its own process, ground truth on) with a fixed gap and
streams from it with N greenlets in this process (see common.py). ``--server independent``
(default): each stream on its own timer; ``engine``: one fixed step for all streams, so
every stream's token arrives in the same instant, as from a batching server. Columns:
  mode        ours (stream_request + Recorder, kernel receive stamps), ours-user (the same,
              stamped when each read returns), ours-greenlet (ours, each stream's greenlet
              reading its socket instead of the event loop's callback) or baseline (user
              stamps, JSON per event, record_value per token: baseline_client.py)
  events/s    token events that arrived while requests were being started (the sending
              window, --seconds), per second of it
  TPOT pXX    measured / true (ms), true = the simulator's send stamps of the same requests
  err         measured - true (ms)
  coal.       gaps < 0.1 ms (events stamped together), ours | in the truth (sent together)
  lag p99     timer: how late a greenlet sleeping 1 ms wakes (the hub lag; on libev it reads
              up to ~1 ms high with no work at all, see probes.HubLagProbe) / io: how long
              data written to a pipe every 1 ms by another process waits before a greenlet
              here reads it: the delay a token event's stamp suffers (probes.IOLagProbe)
  read delay  the package's own client-health metric ("read_delay": our clock at each read
              - the kernel's stamp of the newest data it returned), p99 ms; "-" where reads
              have no kernel stamp
  CPU %       this client process's CPU time / wall time (one core = 100 %; the probes
              included, see the idle row)
  wait %      time the client was runnable but had no core (a busy machine: figures noisy)
  us/ev       client CPU microseconds per token event (sockets, parsing, recording, reports)
              less the probes' own CPU (the idle row's share of the wall time)
  sim         the simulator's CPU + run-queue wait share of the wall time; >= 85 %: it could
              not go faster and limits the rate ('S', simulator-bound)
The first row (streams 0) is the idle lag and the probes' own CPU: the machine's floor.
"""

from __future__ import annotations

from gevent import monkey

monkey.patch_all()

from clients import MODES  # noqa: E402
from common import run_case  # noqa: E402
from output import (  # noqa: E402
    Table,
    add_load_arguments,
    base_parser,
    ms,
    parse_list,
    percent,
    print_header,
    signed_ms,
)
from probes import pinning_note, set_pinning  # noqa: E402


def main() -> None:
    parser = base_parser(__doc__)
    modes = parser.add_mutually_exclusive_group()
    modes.add_argument("--baseline", action="store_true", help="the straightforward client")
    modes.add_argument("--both", action="store_true", help="ours and baseline, side by side")
    modes.add_argument("--modes", help=f"any of {','.join(MODES)}, side by side")
    parser.add_argument("--gaps", default="1,5", help="true gaps, ms")
    parser.add_argument("--streams", default="1,16,64,256")
    parser.add_argument("--seconds", type=float, default=6.0, help="streaming time per case")
    parser.add_argument("--tokens", type=int, default=256, help="mean output tokens (+-50 %%)")
    add_load_arguments(parser)
    args = parser.parse_args()
    set_pinning(not args.no_pin)
    if args.quick:
        args.gaps, args.streams, args.seconds = "1", "1,16,64", 2.0
    modes_run = ["ours", "baseline"] if args.both else ["baseline" if args.baseline else "ours"]
    if args.modes:
        modes_run = parse_list(args.modes, str)
        if unknown := set(modes_run) - set(MODES):
            parser.error(f"unknown mode(s) {', '.join(sorted(unknown))}")
    print_header(
        "accuracy: measured vs true TPOT, one client process",
        [
            f"server {args.server}, {args.seconds:g} s per case, TTFT 5 ms (engine: one step), "
            f"requests of {args.tokens} tokens back to back, one token per event; 'S' = "
            "simulator-bound",
            pinning_note(),
        ],
    )
    table = Table(
        [
            "gap ms",
            "streams",
            "mode",
            "events/s",
            "TPOT p50 meas/true",
            "err",
            "p99 meas/true",
            "err",
            "p99.9 meas/true",
            "err",
            "coal. ours|truth",
            "lag p99 ms timer / io",
            "read delay p99",
            "CPU %",
            "wait %",
            "us/ev",
            "sim",
        ]
    )
    idle = run_case(gap_ms=1, streams=0, tokens=1, duration_s=min(args.seconds, 3))
    table.row(
        "-",
        0,
        "idle",
        "-",
        "-",
        "-",
        "-",
        "-",
        "-",
        "-",
        "-",
        idle.lag_cell,
        "-",
        f"{idle.cpu_percent:.0f}",
        f"{idle.wait_percent:.0f}",
        "-",
        "-",
    )
    for gap in parse_list(args.gaps, float):
        for streams in parse_list(args.streams):
            for mode in modes_run:
                case = run_case(
                    gap_ms=gap,
                    streams=streams,
                    tokens=args.tokens,
                    duration_s=args.seconds,
                    mode=mode,
                    server=args.server,
                    fixed_length=args.fixed_length,
                )
                measured, true, error = case.measured_ms, case.true_ms, case.error_ms
                cells = []
                for p in (50.0, 99.0, 99.9):
                    cells += [f"{ms(measured[p])} / {ms(true[p])}", signed_ms(error[p])]
                sim = case.sim_cell
                delay = case.read_delay_p99_ms
                read_delay = "-" if delay is None else f"{delay:.3f}"
                if case.unmatched:
                    sim += f" ({case.unmatched} unmatched)"
                table.row(
                    f"{gap:g}",
                    streams,
                    mode,
                    f"{case.events_per_s:,.0f}",
                    *cells,
                    f"{percent(case.coalesced)} \\| {percent(case.true_coalesced)}",
                    case.lag_cell,
                    read_delay,
                    f"{case.cpu_percent:.0f}",
                    f"{case.wait_percent:.0f}",
                    f"{case.net_us_per_event(idle):.1f}",
                    sim,
                )


if __name__ == "__main__":
    main()
