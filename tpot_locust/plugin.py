"""Wires the recorder into Locust: one per process, deltas from workers, the final report.

Importing ``tpot_locust`` registers these listeners on Locust's global ``events`` (as a
locustfile's own listeners would be), so ``locust -f locustfiles/chat.py`` records and
reports the same histograms as ``tpot-locust run``.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from locust import events
from locust.env import Environment
from locust.runners import MasterRunner, WorkerRunner

from tpot_locust.events import ensure_token_timings
from tpot_locust.recorder import MetricSet, Recorder
from tpot_locust.report import build_summary, format_full_report, write_results

logger = logging.getLogger(__name__)
MESSAGE_KEY = "tpot_locust"
_STATES: list[RunState] = []


class RunState:
    """This process's recorder and, on a master or local runner, the merged totals."""

    def __init__(self, environment: Environment) -> None:
        self.environment = environment
        self.recorder = Recorder()
        self.totals = MetricSet()
        self.workers_reported: set[str] = set()
        self.summary: dict[str, Any] | None = None

    def collect_local(self) -> MetricSet:
        """Totals including what this process recorded but has not yet added."""
        self.totals.add(self.recorder.take_interval())
        return self.totals

    def reset(self) -> None:
        self.recorder.take_interval()
        self.totals = MetricSet()
        self.summary = None

    def run_info(self) -> dict[str, Any]:
        options = self.environment.parsed_options
        info: dict[str, Any] = {"host": self.environment.host}
        if options is not None:
            info["users"] = getattr(options, "num_users", None)
            info["run_time"] = getattr(options, "run_time", None)
            info["scenario"] = getattr(options, "tpot_scenario_name", None)
        if self.workers_reported:
            info["workers_reported"] = sorted(self.workers_reported)
        return info

    def finish(self) -> dict[str, Any]:
        totals = self.collect_local()
        out = getattr(self.environment.parsed_options, "tpot_out", None)
        if out:
            self.summary = write_results(Path(out), totals, self.run_info())
        else:
            self.summary = build_summary(totals, self.run_info())
        return self.summary


def get_state(environment: Environment) -> RunState:
    state = getattr(environment, "tpot_state", None)
    if state is None:
        state = RunState(environment)
        environment.tpot_state = state
        _STATES.append(state)
        ensure_token_timings(environment.events).add_listener(state.recorder.record)
    return state


@events.init_command_line_parser.add_listener
def _add_arguments(parser: Any, **_: Any) -> None:
    group = parser.add_argument_group("tpot-locust")
    group.add_argument(
        "--tpot-out",
        default=os.environ.get("TPOT_OUT"),
        help="directory for summary.json and histograms.json (env TPOT_OUT)",
    )
    group.add_argument(
        "--tpot-scenario-name", default=os.environ.get("TPOT_SCENARIO_NAME"), help="run label"
    )


@events.init.add_listener
def _on_init(environment: Environment, **_: Any) -> None:
    state = get_state(environment)
    runner = environment.runner
    if isinstance(runner, WorkerRunner):

        @environment.events.report_to_master.add_listener
        def _send_delta(client_id: str, data: dict[str, Any], **_: Any) -> None:
            data[MESSAGE_KEY] = state.recorder.take_interval().encode()

    elif isinstance(runner, MasterRunner):

        @environment.events.worker_report.add_listener
        def _merge_delta(client_id: str, data: dict[str, Any], **_: Any) -> None:
            delta = data.get(MESSAGE_KEY)
            if delta:
                state.totals.add(MetricSet.decode(delta))
                state.workers_reported.add(client_id)


@events.test_start.add_listener
def _on_test_start(environment: Environment, **_: Any) -> None:
    if not isinstance(environment.runner, WorkerRunner):
        get_state(environment).reset()


@events.reset_stats.add_listener
def _on_reset_stats(**_: Any) -> None:
    # Locust's reset_stats event carries no environment; reset every state we know.
    for state in _STATES:
        state.reset()


@events.quitting.add_listener
def _on_quitting(environment: Environment, **_: Any) -> None:
    if isinstance(environment.runner, WorkerRunner):
        return
    state = get_state(environment)
    summary = state.finish()

    @environment.events.quit.add_listener
    def _print_report(**_: Any) -> None:
        if summary["requests"]["ok"] or summary["requests"]["failed"]:
            print("\n" + format_full_report(summary), flush=True)
