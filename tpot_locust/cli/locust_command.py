"""Locust's command line for a scenario: the locustfile, the scenario's load as Locust's
options (a headless run, or the web UI's form filled), and a master with its local workers.

Values travel as --option=value, so that none can be read as an option of its own.
"""

from __future__ import annotations

import importlib.util
import socket
import sys
from pathlib import Path

from tpot_locust.cli.processes import LocustProcesses
from tpot_locust.scenario.model import Scenario

# The locustfile Locust runs, found as the module it is (Locust's -f takes a file)
LOCUSTFILE_MODULE = "tpot_locust.harness.entry.scenario_locustfile"


def locustfile() -> str:
    """The scenario locustfile's path, as the import system finds the module."""
    spec = importlib.util.find_spec(LOCUSTFILE_MODULE)
    if spec is None or spec.origin is None:  # never: it ships with the package
        raise RuntimeError(f"{LOCUSTFILE_MODULE}: not found")
    return spec.origin


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
    # the host is in the environment (LOCUST_HOST, see run.run_scenario): a password in it
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
