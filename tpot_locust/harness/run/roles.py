"""The process's part in the run, chosen once when the run attaches to Locust's runner: alone
(``LocalRole``), the master of workers (``MasterRole``) or one of them (``WorkerRole``), as
Locust's own ``LocalRunner``, ``MasterRunner`` and ``WorkerRunner``.

Each role says what its part does at a test's start, every tick, at a stop, at the finish
and at the quit; ``choose_role`` is the one place that asks which part this process plays.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Protocol

from locust.runners import MasterRunner, WorkerRunner

from tpot_locust.common.results_files import make_folder, write_file
from tpot_locust.harness.load.traffic import ProcessShare
from tpot_locust.harness.run.distributed import MasterLink, WorkerHooks, WorkerLink
from tpot_locust.metrics.stalls import PROCESS_TAG
from tpot_locust.report.finishing import guarded

if TYPE_CHECKING:
    from locust.env import Environment

    from tpot_locust.common.results_folder import ResultsFolder
    from tpot_locust.common.run_facts import Workers
    from tpot_locust.harness.users.user_context import UserContext
    from tpot_locust.metrics.collector import Collector
    from tpot_locust.metrics.phases import RunClock
    from tpot_locust.metrics.recorder import Recorder


class RoleRun(Protocol):
    """What a role reads and calls of its process's run (a ``RunState``)."""

    environment: Environment
    recorder: Recorder
    collector: Collector
    users: UserContext

    @property
    def folder(self) -> ResultsFolder | None: ...

    def begin_traffic(self, share: ProcessShare) -> None: ...

    def end_traffic(self) -> None: ...

    def run_clock(self, start_wall_ns: int) -> RunClock | None: ...

    def stall_record(self) -> dict[str, Any]: ...

    def stop_run(self, reason: str) -> None: ...

    def begin_worker_test(self, share: ProcessShare, settings: list[str]) -> None: ...


class Role:
    """A part in the run. ``reports``: this process makes the run's results (keeps every
    prefill, samples the server, writes checkpoints, gates on the SLO, serves the web UI and
    live metrics); a part whose users stream has its loop watched for stalls. Alone, both."""

    reports = True

    def set_up(self, serve_results: Callable[[], None], read_streams: Callable[[], None]) -> None:
        """At Locust's init: the web UI and live metrics where this part reports the run,
        the stream readers where its users stream."""
        serve_results()
        read_streams()

    def start_test(self, watch_loop: Callable[[], None], start_results: Callable[[], None]) -> None:
        """A test starts (every process): this loop watched where its users stream, the
        run's results begun where this part reports them."""
        watch_loop()
        start_results()

    def begin_test(self, run: RoleRun, start_wall_ns: int, settings: list[str]) -> None:
        """A test starts here (a worker's starts at its master's plan instead)."""

    def add_own_interval(self, collector: Collector, recorder: Recorder, final: bool) -> None:
        """This process's own samples of the interval into the run's totals, every tick."""

    def ask_to_stop(self, reason: str) -> bool:
        """Someone else stops the run for ``reason`` (True), or this process does (False)."""
        return False

    def flush_workers(self, errors: list[str]) -> None:
        """Every worker's final report in, before the totals are made."""

    def missing_workers(self) -> list[str]:
        """Workers whose final report never came."""
        return []

    def workers_lost(self, running: bool) -> int:
        """While a test runs, workers Locust's heartbeats miss; after, those with no final."""
        return 0

    def workers_summary(self) -> Workers | None:
        """The run's workers, as the summary gives them (None: none)."""
        return None

    def windows(self, start_ns: int, end_ns: int) -> dict[str, list[int]]:
        """Each measuring process's window in token time, by its request ids' prefix."""
        return {PROCESS_TAG: [start_ns, end_ns]}

    def save_own_record(self, run: RoleRun, folder: ResultsFolder) -> None:
        """This process's own record beside the results, at the finish."""

    def end_test(self, run: RoleRun) -> bool:
        """A test stops (Locust's ``test_stop``): handled here (True), or the run finishes
        in this process (False)."""
        return False

    def quit_first(self, run: RoleRun) -> None:
        """Locust quits: what must happen before Locust's own quitting listeners run."""


class LocalRole(Role):
    """Alone: sends all of its traffic and reports the run."""

    def begin_test(self, run: RoleRun, start_wall_ns: int, settings: list[str]) -> None:
        run.begin_traffic(ProcessShare(0, 1, start_wall_ns))

    def add_own_interval(self, collector: Collector, recorder: Recorder, final: bool) -> None:
        collector.add_delta(recorder.take_interval(final=final))

    def save_own_record(self, run: RoleRun, folder: ResultsFolder) -> None:
        """``OUT/client_stalls/local.json``: the stall windows of this process's loop."""
        make_folder(folder.client_stalls)
        write_file(folder.local_stalls, json.dumps(run.stall_record()))


class MasterRole(Role):
    """The master: plans each test for its workers, merges their reports, reports the run."""

    def __init__(self, link: MasterLink) -> None:
        self.link = link

    def set_up(self, serve_results: Callable[[], None], read_streams: Callable[[], None]) -> None:
        serve_results()  # no users of its own: nothing to read

    def start_test(self, watch_loop: Callable[[], None], start_results: Callable[[], None]) -> None:
        start_results()

    def begin_test(self, run: RoleRun, start_wall_ns: int, settings: list[str]) -> None:
        self.link.reset()
        self.link.send_plans(start_wall_ns, settings)
        clock = run.run_clock(start_wall_ns)  # the timeline, for the results
        run.recorder.rules = replace(run.recorder.rules, clock=clock)

    def flush_workers(self, errors: list[str]) -> None:
        guarded(errors, "final worker reports", self.link.flush)

    def missing_workers(self) -> list[str]:
        return self.link.missing()

    def workers_lost(self, running: bool) -> int:
        return len(self.link.unreachable() if running else self.link.missing())

    def workers_summary(self) -> Workers | None:
        return self.link.summary()

    def windows(self, start_ns: int, end_ns: int) -> dict[str, list[int]]:
        return self.link.windows


class WorkerRole(Role):
    """A worker: sends its share of the traffic at its master's word, reports to it."""

    reports = False

    def __init__(self, link: WorkerLink) -> None:
        self.link = link

    def set_up(self, serve_results: Callable[[], None], read_streams: Callable[[], None]) -> None:
        read_streams()  # its master reports the run

    def start_test(self, watch_loop: Callable[[], None], start_results: Callable[[], None]) -> None:
        watch_loop()

    def ask_to_stop(self, reason: str) -> bool:
        self.link.ask_master_to_stop(reason)  # which stops every worker
        return True

    def end_test(self, run: RoleRun) -> bool:
        # The master's stop (its Stop button, a web-UI run time): the final delta now,
        # before Locust's "stopped" message, after which the master forgets this worker
        # until it reports ready again.
        self.link.send_final()
        return True

    def quit_first(self, run: RoleRun) -> None:
        """Told to quit on its own (SIGTERM; its supervisor's death): its users stop at once
        and its final delta goes to the master before Locust's "quit" does (a master that
        hears its last worker quit stops reading: both finals were lost when a killed
        supervisor's SIGTERM reached every process as the run time ended); then its record
        (``workers/<id>.json``; a full disk loses the record, not the run's end)."""
        link = self.link
        link.send_final(at_once=True)
        if (folder := run.folder) is not None:
            guarded([], "this worker's record (workers/*.json)", lambda: link.write_audit(folder))


def choose_role(runner: Any, run: RoleRun) -> Role:
    """The part ``runner`` plays, its link to the others made (Locust's runner, once)."""
    if isinstance(runner, WorkerRunner):
        run.users.process_share = None  # until the master's plan says
        run.recorder.causes.sharing = True

        def end_worker_test() -> None:
            run.end_traffic()
            run.users.process_share = None  # the next test's plan gives it again

        hooks = WorkerHooks(run.begin_worker_test, end_worker_test, run.stall_record)
        return WorkerRole(WorkerLink(runner, run.environment, run.recorder, hooks))
    if isinstance(runner, MasterRunner):
        run.recorder.causes.sharing = True
        causes = run.recorder.causes
        return MasterRole(MasterLink(runner, run.environment, run.collector, causes, run.stop_run))
    return LocalRole()
