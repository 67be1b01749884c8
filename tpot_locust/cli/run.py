"""``tpot-locust run``: a scenario as a headless Locust run, with the simulator if needed
(``--web``: Locust's web UI on 127.0.0.1 instead, each test started from its form writing a
results folder and report of its own).

This process only supervises (``processes``): Locust runs in a child process (it
monkey-patches with gevent on import), and so does the embedded simulator when no host is
given; the simulator is stopped last, after every Locust process has written its part.
Its commands are ``locust_command``'s and ``embedded_simulator``'s; the run's end, once they
stopped, is ``run_outcome``'s.
"""

from __future__ import annotations

import os
import socket
import sys
from contextlib import ExitStack
from dataclasses import replace

from tpot_locust.cli.embedded_simulator import start_embedded
from tpot_locust.cli.locust_command import locust_commands
from tpot_locust.cli.processes import Supervisor
from tpot_locust.cli.run_folder import output_dir, prepare_folder, save_scenario
from tpot_locust.cli.run_inputs import RunOptions, load_run_scenario
from tpot_locust.cli.run_outcome import conclude_run, exit_unmeasured
from tpot_locust.common import env_vars
from tpot_locust.common.results_folder import ResultsFolder
from tpot_locust.common.secrets import redact_url
from tpot_locust.scenario.capacity import AUTO_WORKERS, advice, auto_workers
from tpot_locust.scenario.loader import overrides_for_env
from tpot_locust.wire.http_client import Origin
from tpot_locust.wire.segment_stamps import arrival_clock


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
    source, scenario, overrides = load_run_scenario(options)
    if options.workers == AUTO_WORKERS:
        chosen, how = auto_workers(scenario, options.host)
        print(how, flush=True)
        options = replace(options, workers=chosen)
    if warning := advice(scenario, options.workers, host=options.host, clock=arrival_clock()):
        print(warning, file=sys.stderr, flush=True)
    folder = ResultsFolder(output_dir(options, scenario))
    prepare_folder(folder)
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
            return exit_unmeasured(scenario, folder, why)
        if not host:
            simulator = stack.enter_context(start_embedded(scenario, folder.truth))
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
    return conclude_run(scenario, folder, options, code, not host_given)
