"""Wires the recorder into Locust: one per process, deltas from workers, the final report.

``get_state`` connects each process's recorder to our event hooks; the listeners below sit
on Locust's global ``events`` (as a locustfile's own listeners would), so ``locust -f
locustfiles/chat.py`` records and reports the same histograms as ``tpot-locust run``, alone
or as master and workers.
"""

from __future__ import annotations

import argparse
import logging
import math
import signal
import sys
from typing import Any
from weakref import WeakKeyDictionary

import gevent
import locust.runners
from locust import events
from locust.env import Environment
from locust.runners import STATE_INIT, STATE_STOPPED

from tpot_locust.common import env_vars
from tpot_locust.events import tpot_events
from tpot_locust.harness.load.scenario_in_use import scenario_in_use
from tpot_locust.harness.run import stop_now
from tpot_locust.harness.run.metrics_endpoint import parse_address
from tpot_locust.harness.run.run_options import DEFAULT_REPORT_INTERVAL_S, slo_of
from tpot_locust.harness.run.run_state import RunState
from tpot_locust.harness.users.process_context import context_of
from tpot_locust.harness.watch import loop_yield, quiet_loop
from tpot_locust.harness.watch.loop_probe import StallTracer
from tpot_locust.harness.watch.orphan_watch import watch_parent
from tpot_locust.harness.web import webui

__all__ = ["get_state"]
logger = logging.getLogger(__name__)
REPORT_INTERVAL_RANGE_S = (0.1, 60.0)
LOCUST_TABLES_LOGGER = "locust.stats_logger"  # locust.stats.console_logger


class _UntilErrorReport(logging.Filter):
    """Locust's request and percentile tables are dropped; its error report, printed after
    them, is kept (from its first line on)."""

    passing = False

    def filter(self, record: logging.LogRecord) -> bool:
        self.passing = self.passing or record.getMessage().startswith("Error report")
        return self.passing


_until_error_report = _UntilErrorReport()


def report_interval(text: str) -> float:
    """``--tpot-report-interval``/``TPOT_REPORT_INTERVAL``: finite seconds in range (NaN
    would wedge every gevent timer; 0 or less would tick without pause)."""
    low, high = REPORT_INTERVAL_RANGE_S
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and low <= seconds <= high):
        raise argparse.ArgumentTypeError(
            f"{text!r}: must be a number of seconds from {low:g} to {high:g}"
        )
    return seconds


# Each Environment's run, kept here, by the listeners that make it: Locust hands them the
# Environment alone (gone with it).
_runs: WeakKeyDictionary[Environment, RunState] = WeakKeyDictionary()


def get_state(environment: Environment) -> RunState:
    """``environment``'s run, made at its first use (with the scenario locustfile's
    scenario): the recorder is connected to our events, and aggregation from then on yields
    to gevent's loop."""
    state = _runs.get(environment)
    if state is None:
        loop_yield.install()
        _runs[environment] = state = RunState(environment, scenario_in_use())
        context_of(environment).recorded = True
        # Locust's reset_stats event carries no environment: this one's listener knows it
        environment.events.reset_stats.add_listener(lambda **_: state.reset())
        hooks = tpot_events(environment.events)
        hooks.token_timings.add_listener(state.recorder.record)
        hooks.token_timings.add_listener(state.client_errors.observe)
        hooks.prefill_window.add_listener(state.recorder.on_prefill)
    return state


@events.init_command_line_parser.add_listener
def _add_arguments(parser: Any, **_: Any) -> None:
    group = parser.add_argument_group("tpot-locust")
    group.add_argument(
        "--tpot-out",
        default=env_vars.text(env_vars.OUT) or None,
        help="directory for summary.json, histograms.json and interval logs (env TPOT_OUT)",
    )
    group.add_argument(
        "--tpot-report-interval",
        type=report_interval,  # a string default goes through it too: TPOT_REPORT_INTERVAL
        default=env_vars.text(env_vars.REPORT_INTERVAL, str(DEFAULT_REPORT_INTERVAL_S)),
        help="seconds between worker reports and time-series points, 0.1 to 60 (default 1)",
    )
    group.add_argument(
        "--tpot-scenario-name",
        default=env_vars.text(env_vars.SCENARIO_NAME) or None,
        help="run label",
    )
    group.add_argument(
        "--tpot-slo",
        default=env_vars.text(env_vars.SLO) or None,
        metavar="SCENARIO.yaml",
        help="gate the run on this scenario's slo block: exit code 0 pass, 1 fail, 3 invalid "
        "measurement; verdict.json, junit.xml, summary.md in --tpot-out (env TPOT_SLO)",
    )
    parser.add_argument(  # off the web UI: the address is chosen by whoever starts the run
        "--tpot-metrics-address",
        type=parse_address,  # a string default goes through it too: TPOT_METRICS_ADDRESS
        default=env_vars.text(env_vars.METRICS_ADDRESS) or None,
        metavar="[HOST:]PORT",
        include_in_web_ui=False,
        help="serve the merged token metrics for Prometheus at http://HOST:PORT/metrics "
        "(master or single process; HOST 127.0.0.1 unless given; env TPOT_METRICS_ADDRESS)",
    )
    parser.add_argument(  # Locust's own parser: only it can keep an option off the web UI
        "--tpot-set",
        default="",
        metavar="KEY.PATH=VALUE",
        include_in_web_ui=False,
        help="the scenario locustfile: overrides for the next test, one per line, on top of "
        f"{env_vars.OVERRIDES} (a sweep sets them per step through the web form's tpot_set "
        "field)",
    )


@events.init.add_listener
def _on_init(environment: Environment, **_: Any) -> None:
    state = get_state(environment)
    if env_vars.is_set(env_vars.SUPERVISED):
        watch_parent()  # started by tpot-locust run: never outlive it
    state.use_slo(slo_of(environment.parsed_options, state.scenario))
    # Locust re-reads this module global on every report loop.
    locust.runners.WORKER_REPORT_INTERVAL = state.interval_s
    role = state.attach(environment.runner)
    # after Locust's own quitting listeners: fired in reverse, this one runs first
    environment.events.quitting.add_listener(_on_quitting_first)
    stop_now.install(environment)
    role.set_up(lambda: _serve_results(environment, state), quiet_loop.open_readers)
    quiet_loop.collect_garbage_now()
    _count_run_time_from_now()


def _count_run_time_from_now() -> None:
    """Locust's ``--run-time`` is a ``gevent.spawn_later`` counted from the loop's cached
    clock, which has not moved since the loop last turned (before the imports and this set-up):
    a 20 s run stopped 0.6 s early, its window 3 % short. Bring that clock to now."""
    gevent.get_hub().loop.update_now()


def _serve_results(environment: Environment, state: RunState) -> None:
    """This process reports the run: its web UI (the TPOT tab) and live metrics."""
    webui.install(environment, state)
    _warn_if_open_to_all(environment)
    _serve_live_metrics(environment, state)


def _serve_live_metrics(environment: Environment, state: RunState) -> None:
    """``--tpot-metrics-address``: an address that cannot be bound is a usage error (exit
    2) before anything runs, not a page that never comes."""
    address = getattr(environment.parsed_options, "tpot_metrics_address", None)
    if address is None:
        return
    host, port = address
    try:
        state.ticks.serve_live_metrics(host, port)
    except OSError as error:
        print(
            f"tpot-locust: --tpot-metrics-address {host}:{port}: {error.strerror or error}",
            file=sys.stderr,
            flush=True,
        )
        raise SystemExit(2) from None


def _warn_if_open_to_all(environment: Environment) -> None:
    """Locust's web UI listens on every interface by default, and whoever reaches it can
    start a test against any host: say so once, where the run's owner reads it."""
    options = environment.parsed_options
    if environment.web_ui is None or options is None or getattr(options, "web_login", False):
        return
    if (getattr(options, "web_host", "") or "") in ("", "*", "0.0.0.0", "::"):
        logger.warning(
            "tpot-locust: the web UI listens on every interface without --web-login: anyone "
            "who can reach port %s can start tests against any host; use --web-host "
            "127.0.0.1 or --web-login (docs/distributed.md, 'Who can reach the web UI')",
            getattr(options, "web_port", 8089),
        )


@events.test_start.add_listener
def _on_test_start(environment: Environment, **_: Any) -> None:
    get_state(environment).recorder.open_window()  # every process, a worker's too
    quiet_loop.before_streams_start()
    state = get_state(environment)
    state.role.start_test(lambda: _watch_loop(state), state.start)


def _watch_loop(state: RunState) -> None:
    """This process reads streams: its loop watched from its first test on, and the stalls
    its garbage collections cause named."""
    probe = state.probe
    if not probe.running:
        probe.start(state.recorder.on_stall)
        state.collections.install()
        if env_vars.is_set(env_vars.STALL_TRACE):
            StallTracer(probe).start()


@events.test_stopping.add_listener
def _on_test_stopping(environment: Environment, **_: Any) -> None:
    """The stop closes the window: what arrives in a graceful stop's drain (``stop_timeout``)
    finishes requests for their E2E, but no gap of it counts (docs/metrics.md)."""
    get_state(environment).recorder.close_window()


@events.test_stop.add_listener
def _on_test_stop(environment: Environment, **_: Any) -> None:
    state = get_state(environment)
    if not state.role.end_test(state) and state.running:
        state.finish()


def _ignore_sigterm() -> None:
    """This process is ending already (``_on_quitting`` says why a SIGTERM now hurts)."""
    if hasattr(signal, "SIGTERM"):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)


def _on_quitting_first(environment: Environment, **_: Any) -> None:
    """Locust quits: before its own quitting listeners, what this process's part must do
    first (``roles``: a worker's final delta and record)."""
    _ignore_sigterm()
    state = get_state(environment)
    state.role.quit_first(state)


@events.quitting.add_listener
def _on_quitting(environment: Environment, **_: Any) -> None:
    """Locust quits (run time over, SIGTERM, Ctrl-C): its users are still running when this
    fires, and are killed only afterwards. Stop them first, so that requests still streaming
    count as interrupted and every worker's final delta is in before the results are made.

    From here on a SIGTERM is ignored: this process is ending already, and Locust's handler,
    run again (the supervisor's death sends one as the run time ends), exits from inside
    the event loop with a traceback. Ctrl-C, SIGUSR1 (stop now) and SIGKILL still act."""
    _ignore_sigterm()
    state = get_state(environment)
    runner = environment.runner
    if not state.role.reports:
        return  # _on_quitting_first did its part, before Locust's own
    if state.running and runner is not None and runner.state not in (STATE_STOPPED, STATE_INIT):
        runner.stop()  # fires test_stop: the run finishes there (one under way: waited for)
    if state.running:
        state.finish()
    # our screen (printed on quit, or by `tpot-locust run` after its truth check) replaces
    # Locust's own request and percentile tables, printed between this event and quit; its
    # CSV and HTML files still hold them, where asked for
    logging.getLogger(LOCUST_TABLES_LOGGER).addFilter(_until_error_report)
    if state.summary is not None:
        environment.events.quit.add_listener(lambda **_: state.print_report())
    if (endpoint := state.ticks.live_metrics) is not None:  # its port is free once Locust quit
        environment.events.quit.add_listener(lambda **_: endpoint.stop())
