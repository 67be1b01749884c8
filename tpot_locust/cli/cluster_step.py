"""Sweep steps as tests on a running Locust cluster (``tpot-locust sweep --master-url``).

The master and its workers run the scenario locustfile with the same scenario file. Each
step is one test of the master's web-UI session, started as its Start button would: the
step's total users, its run time, and its settings in the ``tpot_set`` field, which the
master applies at the test's start and hands to every worker with its plan. The master
ends the test itself at the run time, so a sweep that dies leaves no load running; the
finished test's summary and histograms are read back and gated here (``cluster_results``),
as a local step's are (``summary.json``, verdict, ``histograms.json``, ``report.html``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from tpot_locust.cli.cluster_results import save_step
from tpot_locust.cli.locust_command import locust_seconds
from tpot_locust.cli.master_api import BUSY_STATES, MasterAPI, MasterError
from tpot_locust.cli.run_folder import save_scenario
from tpot_locust.common.results_folder import ResultsFolder
from tpot_locust.report.gate import EXIT_INVALID
from tpot_locust.report.saved_results import STEP_SUMMARY, checked
from tpot_locust.report.summary_types import Summary
from tpot_locust.scenario.loader import SETTINGS_SEPARATOR, ScenarioText
from tpot_locust.scenario.model import Scenario
from tpot_locust.scenario.tunable import CLIENT_ONLY_PREFIX, untunable
from tpot_locust.sim.profiles import check_engine

POLL_S = 0.5
IDLE_WAIT_S = 60.0  # for the previous test to stop (its stop timeout, the final deltas)
FINISH_GRACE_S = 90.0  # after the run time: stop timeout, every worker's final delta, report
INTERRUPTED = 130


@dataclass
class ClusterSteps:
    api: MasterAPI
    scenario_path: Path
    host: str | None = None
    _workers: int | None = None  # connected at the first step: every step waits for them

    def run(self, folder: Path, overrides: list[str]) -> int:
        """One step: its exit code as a run's (0 pass, 1 fail, 3 invalid, 130 interrupted)."""
        source = ScenarioText(self.scenario_path)  # read once: the step and its saved copy
        scenario = source.load(overrides, check_engine=check_engine)
        sent = [item for item in overrides if not item.startswith(CLIENT_ONLY_PREFIX)]
        if why := untunable(sent):  # the master would refuse the step's Start: say it here
            raise ValueError(f"--master-url: a running cluster's test settings: {why}")
        if self._workers is None:
            self._workers = self._check_master(scenario)
        folder.mkdir(parents=True, exist_ok=True)
        save_scenario(ResultsFolder(folder).scenario, source, overrides)
        self._wait_idle()
        test = int(self.api.summary().get("test", 0)) + 1
        spawn_rate = scenario.spawn_rate or max(scenario.users, 1)
        form = {
            "user_count": str(scenario.users),
            "spawn_rate": f"{spawn_rate:g}",
            "run_time": f"{locust_seconds(scenario.duration_s)}s",
            "tpot_set": SETTINGS_SEPARATOR.join(sent),
        }
        if self.host:
            form["host"] = self.host
        self.api.swarm(form)
        try:
            time.sleep(scenario.duration_s)
            summary = self._finished(test, FINISH_GRACE_S)
        except KeyboardInterrupt:
            self.api.stop()  # the step's load ends with the sweep; keep what it measured
            summary = self._finished(test, FINISH_GRACE_S)
            save_step(self.api, ResultsFolder(folder), test, summary, scenario)
            return INTERRUPTED
        if summary is None:
            self.api.stop()
            print(
                f"tpot-locust sweep: test {test} on the master did not finish within "
                f"{FINISH_GRACE_S:g} s of its run time; stopped it",
                flush=True,
            )
            return EXIT_INVALID
        verdict = save_step(self.api, ResultsFolder(folder), test, summary, scenario)
        return EXIT_INVALID if verdict is None else verdict["exit_code"]

    def _check_master(self, scenario: Scenario) -> int:
        """The master's workers, once it is known to run this scenario and be idle."""
        state = self.api.state()
        where = f"the master at {self.api.url}"
        if state.state in BUSY_STATES:
            raise ValueError(f"{where} is running a test ({state.state}): stop it first")
        if state.distributed and state.workers == 0:
            raise ValueError(f"no worker is connected to {where}")
        running = self.api.summary().get("run", {}).get("scenario")
        if running and running != scenario.name:
            raise ValueError(
                f"{where} runs scenario {running!r}, this sweep is {scenario.name!r}: start it "
                f"with TPOT_SCENARIO={self.scenario_path} (master and workers)"
            )
        return state.workers

    def _wait_idle(self) -> None:
        """Until the last test stopped and its workers are back: Locust's workers report
        ready again only a stop timeout after their stop."""
        deadline = time.monotonic() + IDLE_WAIT_S
        while True:
            state = self.api.state()
            if state.state not in BUSY_STATES and state.workers >= (self._workers or 0):
                return
            if time.monotonic() > deadline:
                raise MasterError(
                    f"the master is {state.state} with {state.workers} of {self._workers} "
                    f"workers {IDLE_WAIT_S:g} s after its last test"
                )
            time.sleep(POLL_S)

    def _finished(self, test: int, wait_s: float) -> Summary | None:
        """Test number ``test``'s summary once it stopped, or None after ``wait_s``; checked
        as a saved step's summary is (a master's answer is input like any file)."""
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            answer = self.api.summary()  # unchecked until it is the one
            if answer.get("test") == test and not answer.get("running"):
                where = Path(f"{self.api.url}/tpot/summary.json")
                summary: Summary = checked(where, answer, STEP_SUMMARY)
                return summary
            if answer.get("test", 0) > test:
                return None  # somebody else started a test on this master meanwhile
            time.sleep(POLL_S)
        return None
