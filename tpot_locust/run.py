"""``tpot-locust run``: a scenario as a headless Locust run, with the simulator if needed.

This process only supervises: Locust runs in a child process (it monkey-patches with
gevent on import), and so does the embedded simulator when no host is given.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

from tpot_locust.scenario import Scenario, load_scenario

LOCUSTFILE = Path(__file__).with_name("entry") / "scenario_locustfile.py"


@dataclass
class RunOptions:
    scenario_path: Path
    host: str | None = None
    users: int | None = None
    spawn_rate: float | None = None
    run_time: str | None = None
    out: Path | None = None
    overrides: list[str] = field(default_factory=list)
    locust_args: list[str] = field(default_factory=list)


def _overrides(options: RunOptions, scenario: Scenario) -> list[str]:
    overrides = list(options.overrides)
    if options.users is not None:
        if len(scenario.classes) != 1:
            names = ", ".join(c.name for c in scenario.classes)
            raise ValueError(
                f"--users needs a single-class scenario; use --set classes.NAME.users=N ({names})"
            )
        overrides.append(f"classes.{scenario.classes[0].name}.users={options.users}")
    if options.run_time is not None:
        overrides.append(f"duration={options.run_time}")
    return overrides


def output_dir(options: RunOptions, scenario: Scenario) -> Path:
    if options.out is not None:
        return options.out
    if scenario.output:
        return Path(scenario.output)
    return Path("results") / f"{scenario.name}-{time.strftime('%Y%m%d-%H%M%S')}"


def simulator_args(scenario: Scenario) -> list[str]:
    args: list[str] = []
    for key, flag in (("ttft_ms", "--ttft-ms"), ("gap_ms", "--gap-ms"),
                      ("natural_tokens", "--natural-tokens")):  # fmt: skip
        if key in scenario.simulator:
            args += [flag, _spec_arg(scenario.simulator[key])]
    seed = scenario.simulator.get("seed", scenario.seed)
    if seed is not None:
        args += ["--seed", str(seed)]
    if "model" in scenario.simulator:
        args += ["--model", str(scenario.simulator["model"])]
    return args


def _spec_arg(value: object) -> str:
    return json.dumps(value)


def locust_command(scenario: Scenario, host: str, out: Path, extra: list[str]) -> list[str]:
    spawn_rate = scenario.spawn_rate or max(scenario.users, 1)
    return [
        sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--headless",
        "-u", str(scenario.users), "-r", f"{spawn_rate:g}", "-t", f"{scenario.duration_s:g}s",
        "--host", host, "--tpot-out", str(out), "--tpot-scenario-name", scenario.name,
        "--only-summary", "--stop-timeout", "5", *extra,
    ]  # fmt: skip


def run_scenario(options: RunOptions) -> int:
    scenario = load_scenario(options.scenario_path, options.overrides)
    overrides = _overrides(options, scenario)
    scenario = load_scenario(options.scenario_path, overrides)
    out = output_dir(options, scenario)
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env["TPOT_SCENARIO"] = str(options.scenario_path)
    env["TPOT_SET"] = "\x1f".join(overrides)
    with ExitStack() as stack:
        host = options.host or scenario.host
        if not host:
            from tpot_locust.sim.process import start_simulator

            simulator = stack.enter_context(
                start_simulator(*simulator_args(scenario), truth=out / "truth.jsonl")
            )
            host = simulator.url
            print(f"tpot-locust: embedded simulator at {host} (truth: {out / 'truth.jsonl'})")
        if options.spawn_rate is not None:
            scenario.spawn_rate = options.spawn_rate
        command = locust_command(scenario, host, out, options.locust_args)
        print(
            f"tpot-locust: {scenario.name}: {scenario.users} users for "
            f"{scenario.duration_s:g} s against {host}; results in {out}",
            flush=True,
        )
        completed = subprocess.run(command, env=env, check=False)
    return completed.returncode
