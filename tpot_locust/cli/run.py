"""``tpot-locust run``: a scenario as a headless Locust run, with the simulator if needed
(``--web``: Locust's web UI on 127.0.0.1 instead, each test started from its form writing a
results folder and report of its own).

This process only supervises (``processes``): Locust runs in a child process (it
monkey-patches with gevent on import), and so does the embedded simulator when no host is
given; the simulator is stopped last, after every Locust process has written its part.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import socket
import sys
import time
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from pathlib import Path

import yaml

from tpot_locust.cli.processes import LocustProcesses, Supervisor
from tpot_locust.common import env_vars
from tpot_locust.common.results_files import (
    check_writable,
    clear_results,
    clear_temporaries,
    write_file,
)
from tpot_locust.common.results_folder import RESULTS_FILES, ResultsFolder
from tpot_locust.common.run_facts import NO_FACTS
from tpot_locust.common.secrets import redact_mapping, redact_url
from tpot_locust.common.text_safety import safe_slug
from tpot_locust.report.finishing import Finished, finish_saved
from tpot_locust.report.first_screen import first_screen
from tpot_locust.report.gate import EXIT_INVALID, unmeasured
from tpot_locust.report.summary import format_full_report
from tpot_locust.report.summary_types import Summary
from tpot_locust.report.verdict_files import format_verdict, write_verdict
from tpot_locust.scenario.capacity import AUTO_WORKERS, advice, auto_workers
from tpot_locust.scenario.loader import ScenarioText, overrides_for_env
from tpot_locust.scenario.model import Scenario, Simulator, scenario_keys
from tpot_locust.scenario.parsed_values import ParsedDistribution
from tpot_locust.scenario.simulator_section import resolve_profile
from tpot_locust.sim.profiles import check_engine
from tpot_locust.wire.http_client import Origin
from tpot_locust.wire.segment_stamps import arrival_clock

EXIT_USAGE = 2  # Locust's, and ours, for a command line that cannot run
# The locustfile Locust runs, found as the module it is (Locust's -f takes a file)
LOCUSTFILE_MODULE = "tpot_locust.harness.entry.scenario_locustfile"


def locustfile() -> str:
    """The scenario locustfile's path, as the import system finds the module."""
    spec = importlib.util.find_spec(LOCUSTFILE_MODULE)
    if spec is None or spec.origin is None:  # never: it ships with the package
        raise RuntimeError(f"{LOCUSTFILE_MODULE}: not found")
    return spec.origin


@dataclass
class RunOptions:
    scenario_path: Path
    host: str | None = None
    users: int | None = None
    spawn_rate: float | None = None
    run_time: str | None = None
    stop_timeout: str | None = None
    out: Path | None = None
    workers: int = 0
    overrides: list[str] = field(default_factory=list)
    locust_args: list[str] = field(default_factory=list)
    truth_tolerance_ms: float | None = None
    sweep_step: bool = False  # a step of ``tpot-locust sweep``: its verdict is the sweep's
    full_report: bool = (
        False  # ``--report full``: every table in the terminal, not the first screen
    )
    web_port: int | None = None  # ``--web``: the web UI's port on 127.0.0.1; None: headless


def _overrides(options: RunOptions, scenario: Scenario) -> dict[str, str]:
    """Every override, with the option it came from (named in its errors)."""
    overrides = {override: f"--set {override}" for override in options.overrides}
    if options.users is not None:
        if len(scenario.classes) != 1:
            names = ", ".join(c.name for c in scenario.classes)
            raise ValueError(
                f"--users needs a single-class scenario; use --set classes.NAME.users=N ({names})"
            )
        overrides[f"classes.{scenario.classes[0].name}.users={options.users}"] = (
            f"--users {options.users}"
        )
    if options.run_time is not None:
        overrides[f"duration={options.run_time}"] = f"--run-time {options.run_time}"
    if options.stop_timeout is not None:
        overrides[f"stop_timeout={options.stop_timeout}"] = f"--stop-timeout {options.stop_timeout}"
    return overrides


def output_dir(options: RunOptions, scenario: Scenario) -> Path:
    if options.out is not None:
        return options.out
    if scenario.output:
        return Path(scenario.output)
    # a slug: a name such as ../../x or a/b/c stays one folder inside results/
    return Path("results") / f"{safe_slug(scenario.name)}-{time.strftime('%Y%m%d-%H%M%S')}"


def simulator_args(scenario: Scenario) -> list[str]:
    """The ``simulator`` section as the embedded server's command line (``model.Simulator``
    names each key's flag)."""
    simulator = scenario.simulator
    args: list[str] = []
    for name, meta in scenario_keys(Simulator).items():
        value = getattr(simulator, meta["field"])
        if name == "seed" and value is None:
            value = scenario.seed
        if meta["flag"] is None or value is None:
            continue
        if meta["check"] == "flag":  # a switch: given when true
            args += [meta["flag"]] if value else []
            continue
        if isinstance(value, ParsedDistribution):  # as written: the simulator parses it
            text = json.dumps(value.written)
        elif meta["check"] == "distribution_or_zero":  # 0: none
            text = json.dumps(value)
        elif name == "profile":
            text = resolve_profile(value, scenario.base_dir)
        else:
            text = str(value)
        args += [meta["flag"], text]
    if scenario.server.tokenizer:  # the simulator counts prompts as the client builds them
        args += ["--tokenizer", scenario.server.tokenizer]
    for model in dict.fromkeys(name for t in scenario.classes for name in t.model or {}):
        args += ["--adapter", model]  # the classes' models: served beside the base model
    if simulator.profile is not None:
        for key, value in simulator.engine.items():
            args += ["--set", f"{key}={json.dumps(value)}"]
    return args


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def headless_options(scenario: Scenario, name: str | None = None) -> list[str]:
    """Locust's options for a headless run of ``scenario``: its load, run time and name
    (``name``: another label). Values travel as --option=value, so that none can be read
    as an option of its own (a scenario named --version gated nothing)."""
    return ["--headless", "--only-summary", *_load_options(scenario, name)]


def locust_seconds(seconds: float, what: str = "run time") -> int:
    """A duration as Locust's parser reads it: whole seconds, written in plain digits (not
    1e+06; 0.5 s cut to 0 would have been no limit at all)."""
    if seconds != int(seconds):
        raise ValueError(f"{what} {seconds:g} s: Locust runs whole seconds")
    return int(seconds)


def _load_options(scenario: Scenario, name: str | None = None) -> list[str]:
    """The scenario's load, run time, name and stop timeout, as Locust's options."""
    spawn_rate = scenario.spawn_rate or max(scenario.users, 1)
    return [
        f"--users={scenario.users}",
        f"--spawn-rate={spawn_rate:g}",
        f"--run-time={locust_seconds(scenario.duration_s)}s",
        f"--tpot-scenario-name={name or scenario.name}",
        f"--stop-timeout={locust_seconds(scenario.stop_timeout_s, 'stop timeout')}",
    ]


def web_options(scenario: Scenario, port: int) -> list[str]:
    """Locust's options for a web-UI session of ``scenario``: the UI on 127.0.0.1 only (the
    form starts load against the host we chose: nobody else may), its form filled with the
    scenario's load and run time."""
    return ["--web-host=127.0.0.1", f"--web-port={port}", *_load_options(scenario)]


def locust_commands(
    scenario: Scenario, out: Path, workers: int, extra: list[str], web_port: int | None = None
) -> LocustProcesses:
    locust = [sys.executable, "-m", "locust", "-f", locustfile()]
    # the host is in the environment (LOCUST_HOST, see run_scenario): a password in it
    # stays out of ps
    how = headless_options(scenario) if web_port is None else web_options(scenario, web_port)
    master = [*locust, *how, f"--tpot-out={out}"]
    if workers <= 0:
        return LocustProcesses(master + extra, [])
    port = free_port()
    master += [
        "--master",
        "--expect-workers",
        str(workers),
        "--master-bind-host",
        "127.0.0.1",
        "--master-bind-port",
        str(port),
    ]
    worker = [
        *locust,
        "--worker",
        "--master-host",
        "127.0.0.1",
        "--master-port",
        str(port),
        "--loglevel",
        "WARNING",
    ]
    return LocustProcesses(master + extra, [worker] * workers)


def unreachable(host: str, timeout_s: float = 5.0) -> str | None:
    """Why nothing can connect to ``host``, or None: a dead host is named before the run
    starts, not after a whole duration of connection errors."""
    origin = Origin.parse(host)
    try:
        socket.create_connection((origin.host, origin.port), timeout_s).close()
    except OSError as error:
        return f"cannot connect to {origin.host_header}: {error.strerror or error}"
    return None


def run_scenario(options: RunOptions) -> int:
    if options.host:
        Origin.parse(options.host)  # a usage error (exit 2) before anything starts
    source = ScenarioText(options.scenario_path)  # read once by this process
    scenario = source.load(options.overrides, check_engine=check_engine)
    labelled = _overrides(options, scenario)
    overrides = list(labelled)
    if overrides != list(options.overrides):  # --users or --run-time: load with them too
        scenario = source.load(overrides, labelled, check_engine)
    headless_options(scenario)  # a run time Locust cannot run is refused before anything
    if options.spawn_rate is not None:
        if options.spawn_rate <= 0:
            raise ValueError(f"--spawn-rate {options.spawn_rate:g}: must be > 0")
        scenario.spawn_rate = options.spawn_rate
    if options.workers == AUTO_WORKERS:
        chosen, how = auto_workers(scenario, options.host)
        print(how, flush=True)
        options = replace(options, workers=chosen)
    if warning := advice(scenario, options.workers, host=options.host, clock=arrival_clock()):
        print(warning, file=sys.stderr, flush=True)
    folder = ResultsFolder(output_dir(options, scenario))
    try:
        folder.root.mkdir(parents=True, exist_ok=True)
        check_writable([folder.root / name for name in RESULTS_FILES])
        # a reused folder's last results: never this run's, nor rebuilt into it after a crash
        clear_results(folder.histograms, folder.checkpoint, folder.summary, folder.workers)
        clear_temporaries(folder.root)
    except OSError as error:
        raise ValueError(f"results folder {folder.root}: {error.strerror or error}") from None
    save_scenario(folder.scenario, source, overrides)
    env = dict(os.environ)
    env[env_vars.SCENARIO] = str(options.scenario_path.resolve())
    env[env_vars.OVERRIDES] = overrides_for_env(overrides)
    env[env_vars.SUPERVISED] = "1"  # this process finishes the run, after the simulator's truth
    with ExitStack() as stack:
        host = options.host or scenario.host
        host_given = bool(host)
        if host and (why := unreachable(host)):
            print(f"tpot-locust: {why} (is the server running?)", file=sys.stderr)
            if scenario.slo.empty:
                return 1
            return _unmeasured(scenario, folder, why)
        if not host:
            from tpot_locust.sim.process import start_simulator

            simulator = stack.enter_context(
                start_simulator(*simulator_args(scenario), truth=folder.truth)
            )
            host = simulator.url
            print(f"tpot-locust: embedded simulator at {host} (truth: {folder.truth})")
        env["LOCUST_HOST"] = host
        commands = locust_commands(
            scenario, folder.root, options.workers, options.locust_args, options.web_port
        )
        workers = f" on {options.workers} worker processes" if options.workers else ""
        if options.web_port is not None:
            print(
                f"tpot-locust: {scenario.name}: web UI at http://127.0.0.1:{options.web_port} "
                f"against {redact_url(host)}{workers}; each test's results in {folder.root} "
                "(the second in test-2/, ...); Ctrl-C ends the session",
                flush=True,
            )
            return Supervisor(commands, env).run()  # each test wrote and printed its own
        print(
            f"tpot-locust: {scenario.name}: {scenario.users} users for "
            f"{scenario.duration_s:g} s against {redact_url(host)}{workers}; results in "
            f"{folder.root}",
            flush=True,
        )
        code = Supervisor(commands, env).run()
    # the simulator has stopped: its truth is whole, and every Locust process has saved
    finished = _finish(scenario, folder, options, not host_given)
    if finished is None:
        if code == EXIT_USAGE:
            print("tpot-locust: Locust refused its command line (see above)", file=sys.stderr)
            return EXIT_USAGE  # an argument after -- it could not take: nothing ran
        if code == EXIT_INVALID:  # it measured, and could not save (a full disk): shown above
            why = f"the results could not be saved (Locust exited {code}): the figures above"
            invalid = _unmeasured(scenario, folder, why, "not a valid measurement")
        else:
            why = f"the run saved no results (Locust exited {code})"
            invalid = _unmeasured(scenario, folder, why)
        return code if code >= 128 else invalid  # stopped by a signal: say so
    if why := nothing_measured(finished.summary):
        print(
            f"tpot-locust: nothing was measured: {why} (Locust exited {code})",
            file=sys.stderr,
            flush=True,
        )
    if finished.verdict is not None:
        lines = format_verdict(finished.verdict, options.sweep_step)
        print("\n" + "\n".join(lines), flush=True)
    if code >= 128:
        return code  # stopped by a signal: say so
    if code < 0:  # Locust (the master, or a local run) killed (-9: SIGKILL): no whole run
        run = finished.summary.get("run", NO_FACTS)
        what = run.recovered or "its results are incomplete"
        role = "master" if options.workers else "process"
        print(
            f"tpot-locust: the Locust {role} was killed ({_signal_name(-code)}); {what}",
            file=sys.stderr,
            flush=True,
        )
        return EXIT_INVALID
    if why and finished.verdict is None:
        return EXIT_INVALID
    return finished.exit_code(code) or 0


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _finish(
    scenario: Scenario, folder: ResultsFolder, options: RunOptions, check_truth: bool
) -> Finished | None:
    """The finishing pass over what Locust saved (``report.finishing``), with the report's
    first screen printed (every table and the checks with ``--report full``); None when
    Locust saved nothing to finish."""
    try:
        finished = finish_saved(
            folder,
            slo=scenario.slo,
            suite=scenario.name,
            truth_tolerance_ms=options.truth_tolerance_ms,
            check_truth=check_truth,
        )
    except (OSError, ValueError) as error:
        if folder.histograms.exists():  # a saved file that cannot be read: say which
            print(f"tpot-locust: {error}", file=sys.stderr, flush=True)
        return None
    summary = finished.summary
    measured = not nothing_measured(summary) or summary["requests"].get("interrupted")
    if measured and not options.full_report:
        text, html = (
            path if path.exists() and not finished.late_errors else None
            for path in (folder.report_text, folder.report)
        )
        screen = first_screen(summary, text, html, sweep_step=options.sweep_step)
        print("\n" + "\n".join(screen), flush=True)
    elif measured:
        print(f"\n{format_full_report(summary)} (results in {folder.root})", flush=True)
    if finished.check_lines and (options.full_report or not measured):
        print("\n".join(finished.check_lines), flush=True)
    if report_error := summary.get("report_error"):
        print(f"tpot-locust: the report is incomplete: {report_error}", file=sys.stderr, flush=True)
    if options.full_report and folder.report.exists() and not finished.late_errors:
        print(f"tpot-locust: report {folder.report}", flush=True)
    return finished


def nothing_measured(summary: Summary) -> str | None:
    """Why a finished run vouches for nothing (None: it measured): not one request
    finished, and no gap of a stream still going arrived inside the window.
    Locust's own exit code does not say so (a scenario whose name Locust read as --version
    exited 0 having run nothing)."""
    requests = summary.get("requests")
    gaps = (summary.get("window") or {}).get("gaps", 0)
    if not (requests and (requests.get("ok") or requests.get("failed"))) and not gaps:
        return "no request finished and no token gap arrived inside the window"
    return None


def _unmeasured(
    scenario: Scenario, folder: ResultsFolder, why: str, headline: str = "nothing was measured"
) -> int:
    """Exit 3 (not a valid measurement), with the verdict files when the run is gated."""
    print(f"tpot-locust: {headline}: {why}", file=sys.stderr, flush=True)
    if not scenario.slo.empty:
        verdict = unmeasured(scenario.slo, f"{headline}: {why}")
        try:
            write_verdict(folder, verdict, scenario.name)
        except OSError as error:  # a full disk: the verdict is on the terminal still
            print(f"tpot-locust: the verdict files: {error}", file=sys.stderr, flush=True)
        print("\n".join(format_verdict(verdict)), flush=True)
    return EXIT_INVALID


def save_scenario(path: Path, source: ScenarioText, overrides: list[str]) -> None:
    """``OUT/scenario.yaml``: the scenario as run, --set applied, with the values of headers
    and body fields whose names suggest a secret removed (keys belong in the environment)."""
    document = redact_mapping(source.document(overrides))
    keys = ", ".join(override.partition("=")[0] for override in overrides)
    header = f"# {source.path} as run" + (f"; set on the command line: {keys}" if keys else "")
    write_file(path, header + "\n" + yaml.safe_dump(document, sort_keys=False))
