"""``tpot-locust``: a thin command layer over the modules that do the work."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path

from tpot_locust.cli.report_commands import compare_runs, show_report
from tpot_locust.common.checked_numbers import option_number
from tpot_locust.common.text_safety import printable
from tpot_locust.common.version import __version__
from tpot_locust.scenario.capacity import AUTO_WORKERS
from tpot_locust.scenario.loader import ScenarioError, load_scenario

EXIT_USAGE = 2
TOKENIZER_HELP = (
    "a local tokenizer (tokenizer.json or a folder with one): prompts of exactly the requested "
    "tokens (server.tokenizer)"
)


MAX_WORKERS = 256  # local worker processes: one per core is the useful most
MAX_SPAWN_RATE = 1_000_000.0
_WORKER_COUNT = option_number(0, MAX_WORKERS, whole=True)


def WORKERS(text: str) -> int:  # noqa: N802 - an argparse type, like the others here
    """``--workers N`` or ``auto`` (``capacity.auto_workers`` chooses, for the scenario)."""
    return AUTO_WORKERS if text == "auto" else int(_WORKER_COUNT(text))


def _run(args: argparse.Namespace) -> int:
    from tpot_locust.cli.run import run_scenario
    from tpot_locust.cli.run_inputs import RunOptions

    options = RunOptions(
        scenario_path=Path(args.scenario),
        host=args.host,
        users=args.users,
        spawn_rate=args.spawn_rate,
        run_time=args.run_time,
        stop_timeout=args.stop_timeout,
        out=Path(args.out) if args.out else None,
        workers=args.workers,
        overrides=_with_tokenizer(args),
        locust_args=args.locust_args or [],
        truth_tolerance_ms=args.truth_tolerance_ms,
        full_report=args.report == "full",
        web_port=int(args.web_port) if args.web else None,
    )
    if args.web:
        if args.repeat is not None:
            raise ValueError("--repeat runs headless: not with --web")
        return run_scenario(options)
    from tpot_locust.cli.repeat import run_series

    return run_series(options, None if args.repeat is None else int(args.repeat))


def _with_tokenizer(args: argparse.Namespace) -> list[str]:
    """``--tokenizer PATH`` is ``--set server.tokenizer=PATH`` (a path from here)."""
    overrides = list(args.set or [])
    if args.tokenizer:
        overrides.append(f"server.tokenizer={Path(args.tokenizer).resolve()}")
    return overrides


def _sweep(args: argparse.Namespace) -> int:
    from tpot_locust.cli.sweep import SweepOptions, run_sweep

    options = SweepOptions(
        scenario_path=Path(args.scenario),
        host=args.host,
        out=Path(args.out) if args.out else None,
        workers=args.workers,
        overrides=_with_tokenizer(args),
        max_steps=args.max_steps,
        master_url=args.master_url,
    )
    return run_sweep(options)


def _with_files(handler: Callable[[argparse.Namespace], int]) -> Callable[..., int]:
    """A command that reads saved results and writes reports: a file it cannot read or
    write (a folder where a file was meant, no permission) is one line and exit 2."""

    def run(args: argparse.Namespace) -> int:
        try:
            return handler(args)
        except (FileNotFoundError, ValueError):
            raise
        except OSError as error:
            where = f"{error.filename}: " if error.filename else ""
            shown = printable(f"{where}{error.strerror or error}")
            print(f"tpot-locust: {shown}", file=sys.stderr)
            return EXIT_USAGE

    return run


def _validate(args: argparse.Namespace) -> int:
    from tpot_locust.sim.profiles import check_engine

    failed = 0
    for path in args.files:
        try:
            scenario = load_scenario(Path(path), check_engine=check_engine)
        except ScenarioError as error:
            for line in str(error).splitlines():  # keys and values are the file's: shown
                print(printable(line), file=sys.stderr)
            failed += 1
        else:
            print(f"{path}: ok ({len(scenario.classes)} classes, {scenario.users} users)")
    return EXIT_USAGE if failed else 0


def _locust_args(args: argparse.Namespace) -> int:
    """Locust's options for a headless run of a scenario (its users, spawn rate, run time
    and name), on one line, for a master started by hand or by a Kubernetes Job:
    ``TPOT_SCENARIO=FILE locust -f locustfiles/scenario.py --master
    $(tpot-locust locust-args FILE)``. The
    name is a slug, so that the shell's word splitting keeps each option whole."""
    from tpot_locust.cli.locust_command import headless_options
    from tpot_locust.common.text_safety import safe_slug
    from tpot_locust.sim.profiles import check_engine

    try:
        scenario = load_scenario(Path(args.scenario), args.set or [], check_engine=check_engine)
        options = headless_options(scenario, safe_slug(scenario.name))
    except (ScenarioError, ValueError) as error:
        for line in str(error).splitlines():
            print(f"tpot-locust: {printable(line)}", file=sys.stderr)
        return EXIT_USAGE
    print(" ".join(options))
    return 0


def _sim_main(argv: list[str]) -> int:
    from tpot_locust.sim.cli import main as sim_main

    return sim_main(argv, prog="tpot-locust sim")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tpot-locust", description="Per-token latency load tests for LLM servers."
    )
    parser.add_argument("--version", action="version", version=f"tpot-locust {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)

    run = commands.add_parser(
        "run", help="run a scenario headless, or in Locust's web UI (simulator if no host)"
    )
    run.add_argument("scenario", help="scenario YAML file")
    run.add_argument("--host", help="server base URL, e.g. http://127.0.0.1:8000")
    run.add_argument("--users", type=int, help="users (single-class scenarios)")
    run.add_argument(
        "--spawn-rate", type=option_number(0, MAX_SPAWN_RATE), help="users started per second"
    )
    run.add_argument("--run-time", help="duration, e.g. 30s, 5m")
    run.add_argument(
        "--stop-timeout",
        metavar="DURATION",
        help="let requests in flight at the end finish this long, for their E2E (default 5s; "
        "scenario key stop_timeout); gaps after the end never count",
    )
    run.add_argument("--out", help="results directory")
    run.add_argument(
        "--workers",
        type=WORKERS,
        default=0,
        help="local worker processes under one master; auto: one a core, less the master's "
        "and the embedded simulator's",
    )
    run.add_argument("--set", action="append", metavar="KEY.PATH=VALUE", help="override a key")
    run.add_argument("--tokenizer", metavar="PATH", help=TOKENIZER_HELP)
    run.add_argument(
        "--truth-tolerance-ms",
        type=option_number(0, 60_000),
        metavar="MS",
        help="with the embedded simulator: exit 3 when a measured TTFT, ITL or TPOT figure "
        "(p50 ... p99.99, max) is further than MS from the simulator's truth",
    )
    run.add_argument(
        "--report",
        choices=("summary", "full"),
        default="summary",
        help="summary (default): the report's first screen (the verdict, the TPOT table, a "
        "line each for the rest; every table in OUT/report.txt); full: every table here",
    )
    run.add_argument(
        "--repeat",
        type=option_number(1, 100, whole=True),
        metavar="N",
        help="run the scenario N times with fresh seeds (OUT/run-1 ...; scenario key repeat), "
        "then show how far apart they landed beside each run's own 95%% intervals",
    )
    run.add_argument(
        "--web",
        action="store_true",
        help="Locust's web UI on 127.0.0.1 instead of a headless run: its form filled with "
        "the scenario's load; each test started there writes its results and report",
    )
    run.add_argument(
        "--web-port",
        type=option_number(1, 65535, whole=True),
        default=8089,
        help="with --web: the web UI's port (8089, as Locust's)",
    )
    run.set_defaults(handler=_run, locust_args=[])
    run.epilog = "Arguments after -- go to Locust unchanged, e.g. -- --csv results/run"

    sweep = commands.add_parser(
        "sweep", help="step a scenario's load (its sweep: block) until its SLOs break"
    )
    sweep.add_argument("scenario", help="scenario YAML file with sweep: and slo: blocks")
    sweep.add_argument("--host", help="server base URL (default: the embedded simulator)")
    sweep.add_argument("--out", help="results directory (one folder per step inside)")
    sweep.add_argument(
        "--workers", type=WORKERS, default=0, help="N local worker processes, or auto (as run's)"
    )
    sweep.add_argument("--set", action="append", metavar="KEY.PATH=VALUE", help="override a key")
    sweep.add_argument(
        "--max-steps", type=option_number(1, 1000, whole=True), help="run at most this many steps"
    )
    sweep.add_argument("--tokenizer", metavar="PATH", help=TOKENIZER_HELP)
    sweep.add_argument(
        "--master-url",
        metavar="URL",
        help="run each step as a test of this running Locust master (its web UI, e.g. "
        "http://127.0.0.1:8089), started with the scenario locustfile and this scenario",
    )
    sweep.set_defaults(handler=_sweep)

    report = commands.add_parser("report", help="re-print the report of a results directory")
    report.add_argument("out", nargs="+", help="results directory of a run (several: --html)")
    report.add_argument("--json", action="store_true", help="print the summary as JSON")
    report.add_argument(
        "--html",
        action="store_true",
        help="write report.html (one self-contained file; several runs overlaid)",
    )
    report.add_argument("--output", help="with --html: the file (default OUT/report.html)")
    report.set_defaults(handler=_with_files(show_report))

    compare = commands.add_parser(
        "compare", help="compare two runs' saved histograms; exit 1 on a regression"
    )
    compare.add_argument("base", help="results directory of the baseline run")
    compare.add_argument("candidate", help="results directory of the run to judge")
    compare.add_argument(
        "--max-regression", default="10%", help="largest allowed rise of a gated figure (10%%)"
    )
    compare.add_argument("--metrics", help="comma-separated, e.g. tpot,ttft (default: all)")
    compare.add_argument("--percentiles", help="comma-separated, e.g. p50,p99,p99.99")
    shown = compare.add_mutually_exclusive_group()
    shown.add_argument("--json", action="store_true", help="print the comparison as JSON")
    shown.add_argument("--markdown", action="store_true", help="print a Markdown table")
    compare.set_defaults(handler=_with_files(compare_runs))

    validate = commands.add_parser("validate", help="check scenario files")
    validate.add_argument("files", nargs="+")
    validate.set_defaults(handler=_validate)

    locust_args = commands.add_parser(
        "locust-args", help="print Locust's options for a headless run of a scenario"
    )
    locust_args.add_argument("scenario", help="scenario YAML file")
    locust_args.add_argument(
        "--set", action="append", metavar="KEY.PATH=VALUE", help="override a key"
    )
    locust_args.set_defaults(handler=_with_files(_locust_args))

    # Handled before parsing (its options are the simulator's own); listed for --help.
    commands.add_parser("sim", help="start the simulated server (tpot-locust sim --help)")
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["sim"]:
        return _sim_main(argv[1:])  # the simulator parses its own options
    locust_args: list[str] = []
    if "--" in argv:
        split = argv.index("--")
        argv, locust_args = argv[:split], argv[split + 1 :]
    args = build_parser().parse_args(argv)
    if locust_args:
        if args.command != "run":
            print("tpot-locust: arguments after -- are for `run` only", file=sys.stderr)
            return EXIT_USAGE
        args.locust_args = locust_args
    try:
        code: int = args.handler(args)  # a subcommand's exit code
        return code
    except ScenarioError as error:
        for line in str(error).splitlines():  # a file's keys and values, shown, not obeyed
            print(f"tpot-locust: {printable(line)}", file=sys.stderr)
        return EXIT_USAGE
    except (FileNotFoundError, ValueError) as error:
        print(f"tpot-locust: {printable(str(error))}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # the reader went away (`... | head`): no traceback for that
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


if __name__ == "__main__":
    sys.exit(main())
