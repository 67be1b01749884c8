"""``tpot-locust run``: a scenario as a headless Locust run, with the simulator if needed.

This process only supervises (``processes``): Locust runs in a child process (it
monkey-patches with gevent on import), and so does the embedded simulator when no host is
given; the simulator is stopped last, after every Locust process has written its part.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tpot_locust.cli.processes import LocustProcesses, Supervisor
from tpot_locust.common.secrets import redact_mapping, redact_url
from tpot_locust.common.text_safety import safe_slug
from tpot_locust.report.attribution_check import attribution_check, format_attribution_check
from tpot_locust.report.gate import EXIT_INVALID, unmeasured
from tpot_locust.report.gating import SUPERVISED_ENV, gate_summary
from tpot_locust.report.html import HTML_FILE, SCENARIO_FILE, write_run_report
from tpot_locust.report.results_files import SUMMARY_FILE, load_results
from tpot_locust.report.truth_check import (
    TRUTH_FILE,
    format_truth_check,
    load_stall_windows,
    truth_check,
)
from tpot_locust.report.verdict_files import format_verdict, write_verdict
from tpot_locust.scenario.capacity import advice
from tpot_locust.scenario.loader import (
    OVERRIDES_ENV,
    load_scenario,
    overrides_for_env,
    scenario_document,
)
from tpot_locust.scenario.model import Scenario, Simulator, scenario_keys
from tpot_locust.scenario.schema import resolve_profile
from tpot_locust.sim.profiles import check_engine
from tpot_locust.wire.http_client import Origin

EXIT_USAGE = 2  # Locust's, and ours, for a command line that cannot run
TRUTH_CHECK_FAILED = 3  # exit code: the figures are not the simulator's (docs/metrics.md)
LOCUSTFILE = Path(__file__).parents[1] / "harness" / "entry" / "scenario_locustfile.py"


@dataclass
class RunOptions:
    scenario_path: Path
    host: str | None = None
    users: int | None = None
    spawn_rate: float | None = None
    run_time: str | None = None
    out: Path | None = None
    workers: int = 0
    overrides: list[str] = field(default_factory=list)
    locust_args: list[str] = field(default_factory=list)
    truth_tolerance_ms: float | None = None


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
        if meta["check"] == "distribution":
            text = json.dumps(value)
        elif name == "profile":
            text = resolve_profile(value, scenario.base_dir)
        else:
            text = str(value)
        args += [meta["flag"], text]
    if scenario.server.tokenizer:  # the simulator counts prompts as the client builds them
        args += ["--tokenizer", scenario.server.tokenizer]
    if simulator.profile is not None:
        for key, value in simulator.engine.items():
            args += ["--set", f"{key}={json.dumps(value)}"]
    return args


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def locust_commands(
    scenario: Scenario, out: Path, workers: int, extra: list[str]
) -> LocustProcesses:
    locust = [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE)]
    spawn_rate = scenario.spawn_rate or max(scenario.users, 1)
    # Values from the scenario or the user travel as --option=value, so that none can be
    # read as an option of its own (a scenario named --version gated nothing); the host is
    # in the environment (LOCUST_HOST, see run_scenario): a password in it stays out of ps.
    master = [
        *locust, "--headless", f"--users={scenario.users}", f"--spawn-rate={spawn_rate:g}",
        f"--run-time={scenario.duration_s:g}s", f"--tpot-out={out}",
        f"--tpot-scenario-name={scenario.name}", "--only-summary", "--stop-timeout=5",
    ]  # fmt: skip
    if workers <= 0:
        return LocustProcesses(master + extra, [])
    port = free_port()
    master += ["--master", "--expect-workers", str(workers), "--master-bind-host", "127.0.0.1",
               "--master-bind-port", str(port)]  # fmt: skip
    worker = [*locust, "--worker", "--master-host", "127.0.0.1", "--master-port", str(port),
              "--loglevel", "WARNING"]  # fmt: skip
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
    scenario = load_scenario(options.scenario_path, options.overrides, check_engine=check_engine)
    labelled = _overrides(options, scenario)
    overrides = list(labelled)
    if overrides != list(options.overrides):  # --users or --run-time: load with them too
        scenario = load_scenario(options.scenario_path, overrides, labelled, check_engine)
    if scenario.duration_s != int(scenario.duration_s):
        raise ValueError(f"run time {scenario.duration_s:g} s: Locust runs whole seconds")
    if options.spawn_rate is not None:
        if options.spawn_rate <= 0:
            raise ValueError(f"--spawn-rate {options.spawn_rate:g}: must be > 0")
        scenario.spawn_rate = options.spawn_rate
    if warning := advice(scenario, options.workers, host=options.host):
        print(warning, file=sys.stderr, flush=True)
    out = output_dir(options, scenario)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise ValueError(f"results folder {out}: {error.strerror or error}") from None
    save_scenario(out / SCENARIO_FILE, options.scenario_path, overrides)
    env = dict(os.environ)
    env["TPOT_SCENARIO"] = str(options.scenario_path.resolve())
    env[OVERRIDES_ENV] = overrides_for_env(overrides)
    env[SUPERVISED_ENV] = "1"  # the verdict is printed here, after the truth check
    with ExitStack() as stack:
        host = options.host or scenario.host
        host_given = bool(host)
        if host and (why := unreachable(host)):
            print(f"tpot-locust: {why} (is the server running?)", file=sys.stderr)
            if scenario.slo.empty:
                return 1
            verdict = unmeasured(scenario.slo, f"nothing was measured: {why}")
            write_verdict(out, verdict, scenario.name)
            print("\n".join(format_verdict(verdict)), flush=True)
            return verdict["exit_code"]
        if not host:
            from tpot_locust.sim.process import start_simulator

            simulator = stack.enter_context(
                start_simulator(*simulator_args(scenario), truth=out / TRUTH_FILE)
            )
            host = simulator.url
            print(f"tpot-locust: embedded simulator at {host} (truth: {out / 'truth.jsonl'})")
        env["LOCUST_HOST"] = host
        commands = locust_commands(scenario, out, options.workers, options.locust_args)
        workers = f" on {options.workers} worker processes" if options.workers else ""
        print(
            f"tpot-locust: {scenario.name}: {scenario.users} users for "
            f"{scenario.duration_s:g} s against {redact_url(host)}{workers}; results in {out}",
            flush=True,
        )
        code = Supervisor(commands, env).run()
    truth_passed = None
    if not host_given:
        truth_passed = check_against_truth(out, options.truth_tolerance_ms)
    if why := nothing_measured(out):
        if code == EXIT_USAGE and not (out / SUMMARY_FILE).exists():
            print("tpot-locust: Locust refused its command line (see above)", file=sys.stderr)
            return EXIT_USAGE  # an argument after -- it could not take: nothing ran
        invalid = _unmeasured(scenario, out, f"{why} (Locust exited {code})")
        return code if code >= 128 else invalid  # stopped by a signal: say so
    summary = json.loads((out / SUMMARY_FILE).read_text())  # the truth check is in it now
    verdict = None
    if not scenario.slo.empty:
        verdict = gate_summary(scenario.slo, summary, out, scenario.name)
    _write_report(out, summary)
    if verdict is not None:
        print("\n" + "\n".join(format_verdict(verdict)), flush=True)
        return code if code >= 128 else verdict["exit_code"]  # stopped by a signal: say so
    if truth_passed is False:
        return TRUTH_CHECK_FAILED
    if summary.get("report_error") and code < 128:
        return EXIT_INVALID  # a part of the report is missing: the run cannot vouch for it
    return code


def _write_report(out: Path, summary: dict[str, Any]) -> None:
    """``report.html`` of everything, truth check and verdict too; a page that cannot be
    built is named (in ``summary.json`` as well), and the run's results stand."""
    try:
        totals, _ = load_results(out)
        write_run_report(out, summary, totals)
    except Exception as error:  # noqa: BLE001 - any part of the page; the results are kept
        why = f"{HTML_FILE}: {error}"
        print(f"tpot-locust: {why}", file=sys.stderr, flush=True)
        summary["report_error"] = summary.get("report_error") or why
        summary["complete"] = False
        (out / SUMMARY_FILE).write_text(json.dumps(summary, indent=2) + "\n")
        return
    print(f"tpot-locust: report {out / HTML_FILE}", flush=True)


def nothing_measured(out: Path) -> str | None:
    """Why a finished run vouches for nothing (None: it measured): no summary was written,
    or not one request finished. Locust's own exit code does not say so (a scenario whose
    name Locust read as --version exited 0 having run nothing)."""
    path = out / SUMMARY_FILE
    if not path.is_file():
        return f"the run wrote no {SUMMARY_FILE}"
    try:
        requests = json.loads(path.read_text()).get("requests") or {}
    except (OSError, ValueError, AttributeError):
        return f"its {SUMMARY_FILE} cannot be read"
    if not requests.get("ok") and not requests.get("failed"):
        return "no request finished"
    return None


def _unmeasured(scenario: Scenario, out: Path, why: str) -> int:
    """Exit 3 (not a valid measurement), with the verdict files when the run is gated."""
    print(f"tpot-locust: nothing was measured: {why}", file=sys.stderr, flush=True)
    if not scenario.slo.empty:
        verdict = unmeasured(scenario.slo, f"nothing was measured: {why}")
        write_verdict(out, verdict, scenario.name)
        print("\n".join(format_verdict(verdict)), flush=True)
    return EXIT_INVALID


def save_scenario(path: Path, scenario_path: Path, overrides: list[str]) -> None:
    """``OUT/scenario.yaml``: the scenario as run, --set applied, with the values of headers
    and body fields whose names suggest a secret removed (keys belong in the environment)."""
    document = redact_mapping(scenario_document(scenario_path, overrides))
    keys = ", ".join(override.partition("=")[0] for override in overrides)
    header = f"# {scenario_path} as run" + (f"; set on the command line: {keys}" if keys else "")
    path.write_text(header + "\n" + yaml.safe_dump(document, sort_keys=False))


def check_against_truth(out: Path, tolerance_ms: float | None) -> bool | None:
    """Compare the run's summary with the simulator's truth, and its attribution of the
    tail with the engine's true causes (``attribution_check``); store and print both.
    Returns whether it passed (None: no tolerance given, or nothing to compare)."""
    summary_path, truth_path = out / SUMMARY_FILE, out / TRUTH_FILE
    if not summary_path.exists() or not truth_path.exists():
        return None
    summary = json.loads(summary_path.read_text())
    check = truth_check(summary, truth_path, tolerance_ms, load_stall_windows(out))
    summary["truth_check"] = check
    attribution = summary["attribution_check"] = attribution_check(summary, truth_path)
    summary_path.write_text(json.dumps(summary, indent=2) + "\n")
    lines = format_truth_check(check) + format_attribution_check(attribution)
    print("\n".join(lines), flush=True)
    return check["passed"]
