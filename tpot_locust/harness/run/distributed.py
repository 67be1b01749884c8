"""Worker -> master deltas and the flush handshake that loses nothing at shutdown.

Locust's master waits only 0.5 s for workers' last reports before quitting; workers slow
to stop lost 8.9 % of their values that way (measured). So when a test stops, the master
sends ``tpot_flush`` to every worker it knows; each worker stops its users (if the master
has not already), then answers ``tpot_final`` with everything recorded since its last
report. The master waits for every live worker's final (bounded by ``--stop-timeout``
plus a margin). A worker that died or never answered is named in the summary and the run
is marked incomplete.

Cause windows (``metrics.causes``: every request's prefill, the server's windows) travel in
batches: each worker sends its new windows to the master every ``CAUSES_EVERY_S``, and the
master sends everything it received, with its own (the server's), to every worker, so each
process tags its token gaps with every process's windows (``TAG_HOLD_S`` leaves the time).

Each report also carries the worker's row of the summary's per-worker view, packed with its
delta (``worker_deltas``): the master keeps the latest row of each worker, a few hundred
bytes, never the worker's buckets.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import gevent
from gevent.event import Event
from locust.runners import STATE_MISSING, MasterRunner, WorkerRunner

from tpot_locust.common.results_files import make_folder, write_file
from tpot_locust.common.results_folder import ResultsFolder
from tpot_locust.common.run_facts import Workers
from tpot_locust.common.text_safety import safe_slug
from tpot_locust.harness.load.traffic import ProcessShare
from tpot_locust.harness.run.stop_now import stop_users_now, wait_for_users
from tpot_locust.harness.run.worker_deltas import (
    DeltaFormatError,
    WorkerDeltas,
    unpack_delta,
    unpack_row,
)
from tpot_locust.harness.run.worker_names import WorkerNames
from tpot_locust.harness.users.user_settings import settings_digests
from tpot_locust.metrics.stalls import PROCESS_TAG, STALLS_KEY
from tpot_locust.metrics.wire_delta import WireDelta
from tpot_locust.report.worker_rows import LatestRows, workers_view

if TYPE_CHECKING:
    from locust.env import Environment

    from tpot_locust.metrics.causes import CauseTimeline
    from tpot_locust.metrics.collector import Collector
    from tpot_locust.metrics.recorder import Recorder

logger = logging.getLogger(__name__)

DELTA_KEY = "tpot_locust"
FLUSH = "tpot_flush"
FINAL = "tpot_final"
WINDOW_KEY = "tpot_window"  # a worker's final: [its request id prefix, window start, end]
PLAN = "tpot_plan"  # master -> worker at test start: its share of open-loop traffic
CAUSES = "tpot_causes"  # cause windows: worker -> master -> every worker, in batches
CAUSES_EVERY_S = 0.25
MAX_WINDOWS_PER_MESSAGE = 100_000
STOP_RUN = "tpot_stop_run"  # worker -> master: the run cannot measure anything (why)
FLUSH_MARGIN_S = 10.0
MASTER_KEEPS_WINDOWS_S = 120.0  # the master tags no gaps: it keeps recent windows only


def _every(seconds: float, job: Callable[[], None]) -> None:
    """``job`` every ``seconds`` for the life of the process (a greenlet's loop)."""
    while True:
        gevent.sleep(seconds)
        try:
            job()
        except Exception:  # noqa: BLE001 - a relay must outlive one bad batch
            logger.exception("tpot-locust: %s failed", getattr(job, "__name__", job))


def _apply_causes(causes: CauseTimeline, data: Any, sender: str) -> bool:
    """Apply a batch of cause windows; a batch that is not one is refused, logged."""
    windows = data.get("windows") if isinstance(data, dict) else None
    if not isinstance(windows, list) or len(windows) > MAX_WINDOWS_PER_MESSAGE:
        logger.warning("tpot-locust: %s sent cause windows this process cannot read", sender)
        return False
    try:
        causes.apply_wire(windows)
    except (ValueError, TypeError, KeyError) as error:
        logger.warning("tpot-locust: %s sent a bad cause window: %s", sender, error)
        return False
    return True


@dataclass(frozen=True)
class WorkerHooks:
    """What a worker's run does at the master's word: begin its share of the traffic (a new
    test, with the test's own scenario settings), end it (the stop), and say which stall
    windows it saw (its audit file)."""

    begin_traffic: Callable[[ProcessShare, list[str]], None]
    end_traffic: Callable[[], None]
    stall_record: Callable[[], dict[str, Any]]


class WorkerLink:
    """Worker side: ship deltas with every stats report; answer the master's flush."""

    def __init__(
        self, runner: WorkerRunner, environment: Environment, recorder: Recorder, hooks: WorkerHooks
    ) -> None:
        self.runner = runner
        self.environment = environment
        self.recorder = recorder
        self.hooks = hooks
        self.deltas = WorkerDeltas(recorder)  # each report's, and all it sent
        self._final_sent = False
        self._final_done = Event()  # set once the final is sent (a second caller waits)
        self._asked_to_stop = False
        environment.events.report_to_master.add_listener(self._attach_delta)
        runner.register_message(FLUSH, self._on_flush, concurrent=True)
        runner.register_message(PLAN, self._on_plan)
        runner.register_message(CAUSES, self._on_causes)
        self._publisher = gevent.spawn(_every, CAUSES_EVERY_S, self.publish_causes)

    def _on_plan(self, environment: Any, msg: Any, **_: Any) -> None:
        self._final_sent = False  # a new test
        self._final_done = Event()
        self._asked_to_stop = False
        self.deltas.new_test()
        plan = msg.data
        if plan.get("host") and not self.environment.host:
            self.environment.host = plan["host"]
        share = ProcessShare(plan["index"], plan["count"], plan["start_wall_ns"])
        self.hooks.begin_traffic(share, plan.get("settings", []))
        if differing := _differing_classes(plan.get("classes"), self.environment.user_classes):
            reason = (
                f"its {', '.join(differing)} settings differ from the master's (another "
                "scenario file or locustfile?)"
            )
            logger.error("tpot-locust: %s", reason)
            self.ask_master_to_stop(reason)

    def _on_causes(self, environment: Any, msg: Any, **_: Any) -> None:
        _apply_causes(self.recorder.causes, msg.data, "the master")

    def ask_master_to_stop(self, reason: str) -> None:
        if not self._asked_to_stop:
            self._asked_to_stop = True
            self.runner.send_message(STOP_RUN, {"reason": reason})

    def publish_causes(self) -> None:
        """This worker's new cause windows, to the master (which relays them to all)."""
        if windows := self.recorder.causes.take_outgoing():
            self.runner.send_message(CAUSES, {"windows": windows})

    def _attach_delta(self, client_id: str, data: dict[str, Any], **_: Any) -> None:
        data[DELTA_KEY] = self.deltas.take()

    def write_audit(self, folder: ResultsFolder) -> None:
        """``OUT/workers/<id>.json``: what this worker recorded and sent, to check merges."""
        make_folder(folder.workers)
        audit = {
            "client_id": self.runner.client_id,
            **self.deltas.sent.encode(),
            STALLS_KEY: self.hooks.stall_record(),
            "window_wall_ns": list(self.recorder.window_ns()),
        }
        name = safe_slug(self.runner.client_id, max_length=200)  # an id never picks the folder
        write_file(folder.worker(name), json.dumps(audit))

    def _on_flush(self, environment: Any, msg: Any, **_: Any) -> None:
        self.send_final()

    def send_final(self, at_once: bool = False) -> None:
        """Stop this worker's users and send everything not yet sent; once per test.

        ``at_once`` (this worker quits on its own: SIGTERM, its supervisor's death): its
        users are killed, their requests in flight interrupted, and the final goes now,
        even while a flush waits on them (a graceful stop waits ``stop_timeout``, a user
        backing off from a dead server longer; the dying master, or a pod's grace period,
        will not). Any other second caller waits for the final: Locust's "quit", sent
        after, must not overtake it (a master that hears its last worker quit stops
        reading)."""
        if self._final_done.is_set():
            return
        if self._final_sent and not at_once:
            self._final_done.wait(timeout=(self.environment.stop_timeout or 0) + 3)
            return
        self._final_sent = True
        try:
            self._stop_and_send_final(at_once)
        finally:
            self._final_done.set()

    def _stop_and_send_final(self, at_once: bool) -> None:
        runner = self.runner
        if at_once:
            stop_users_now(self.environment)
        elif runner.user_count:
            runner.stop()  # headless quit path: the master did not send "stop" first
        wait_for_users(runner, self.environment)
        if self._final_done.is_set():
            return  # sent at once meanwhile: this worker quits
        self.hooks.end_traffic()
        self.publish_causes()
        start, end = self.recorder.window_ns()
        runner.send_message(
            FINAL, {DELTA_KEY: self.deltas.take(final=True), WINDOW_KEY: [PROCESS_TAG, start, end]}
        )


class MasterLink:
    """Master side: merge deltas, track workers, run the flush handshake."""

    def __init__(
        self,
        runner: MasterRunner,
        environment: Environment,
        collector: Collector,
        causes: CauseTimeline,
        on_stop_run: Callable[[str], None],
    ) -> None:
        self.runner = runner
        self.environment = environment
        self.collector = collector
        self.causes = causes  # the run's: kept for the report, and its own (the server's)
        self._relayed: list[list[Any]] = []  # received since the last relay
        self.on_stop_run = on_stop_run
        self.seen: set[str] = set()
        self.finals: set[str] = set()
        self.refused: set[str] = set()  # workers of another version: nothing of theirs merged
        # each worker's latest row (``report.worker_rows``): its own read delays (one
        # overloaded worker among many barely moves the merged histogram, so the report
        # judges every worker by its own), loop lag and stalls, and its own attribution
        self.rows = LatestRows()
        self.names = WorkerNames()  # host#index a worker, kept for the session
        # each worker's window in token time, by the prefix of its request ids: the truth
        # check holds each request to the window of the process that measured it
        self.windows: dict[str, list[int]] = {}
        environment.events.worker_report.add_listener(self._merge_report)
        runner.register_message(FINAL, self._on_final)
        runner.register_message(CAUSES, self._on_causes)
        runner.register_message(STOP_RUN, self._on_stop_run)
        self._relayer = gevent.spawn(_every, CAUSES_EVERY_S, self.relay_causes)

    def reset(self) -> None:
        self.seen = {client.id for client in self.runner.clients.all}
        self.finals = set()
        self.rows = LatestRows()
        self.windows = {}

    def send_plans(self, start_wall_ns: int, settings: list[str]) -> None:
        """Give each live worker its index and share of the open-loop traffic, and the
        test's own scenario settings (``--tpot-set``)."""
        alive = sorted(self._alive(), key=self.runner.get_worker_index)
        # each class's settings as the master made them (``settings_digests``): a worker that
        # made others stops the run at the start, named
        digests = settings_digests(self.environment.user_classes)
        for index, client_id in enumerate(alive):
            # the host too: Locust's spawn message, which carries it, may come after the
            # first open-loop arrival or burst (a session at t = 0 found no host and was lost)
            plan = {
                "index": index,
                "count": len(alive),
                "start_wall_ns": start_wall_ns,
                "host": self.environment.host,
                "settings": settings,
                "classes": digests,
            }
            self.runner.send_message(PLAN, plan, client_id)

    def _on_stop_run(self, environment: Any, msg: Any, **_: Any) -> None:
        self.on_stop_run(f"{msg.node_id}: {msg.data['reason']}")

    def _on_causes(self, environment: Any, msg: Any, **_: Any) -> None:
        if _apply_causes(self.causes, msg.data, f"worker {msg.node_id}"):
            self._relayed.extend(msg.data["windows"])

    def relay_causes(self) -> None:
        """Every window received since the last relay, and the master's own, to every
        live worker (its own come back too: applying a window twice changes nothing)."""
        windows, self._relayed = self._relayed + self.causes.take_outgoing(), []
        if windows:
            for client_id in self._alive():
                self.runner.send_message(CAUSES, {"windows": windows}, client_id)
        self.causes.prune(time.time_ns() - int(MASTER_KEEPS_WINDOWS_S * 1e9))

    def _merge_report(self, client_id: str, data: dict[str, Any], **_: Any) -> None:
        self.seen.add(client_id)
        if packed := data.get(DELTA_KEY):
            self._add_delta(client_id, packed)

    def _on_final(self, environment: Any, msg: Any, **_: Any) -> None:
        self.seen.add(msg.node_id)
        packed = msg.data.get(DELTA_KEY) if isinstance(msg.data, dict) else None
        if packed:
            self._add_delta(msg.node_id, packed)
        window = msg.data.get(WINDOW_KEY) if isinstance(msg.data, dict) else None
        if isinstance(window, list) and _is_window(window):
            if len(self.windows) < MAX_WORKER_WINDOWS:
                self.windows[window[0]] = [window[1], window[2]]
        if msg.node_id not in self.refused:
            self.finals.add(msg.node_id)

    def _add_delta(self, client_id: str, packed: Any) -> None:
        """Merge a worker's delta; one of another version is refused, once, with the run."""
        try:
            delta, row = unpack_delta(client_id, packed), unpack_row(packed)
        except (ValueError, TypeError, KeyError, AttributeError) as error:  # format, or damage
            refusal = (
                str(error)
                if isinstance(error, DeltaFormatError)
                else (
                    f"worker {client_id} sent a delta this master cannot read "
                    f"({type(error).__name__}: {error})"
                )
            )
            if client_id not in self.refused:
                self.refused.add(client_id)
                logger.error("tpot-locust: %s", refusal)
                self.on_stop_run(refusal)
            return
        self._merge(client_id, delta, row)

    def _merge(self, client_id: str, delta: WireDelta, row: bytes | None) -> None:
        delta.client.name_worker(self.names(client_id))
        self.collector.add_delta(delta)
        if row is not None:
            self.rows.keep(client_id, row)

    def _alive(self) -> set[str]:
        return {c.id for c in self.runner.clients.all if c.state != STATE_MISSING}

    def flush(self) -> None:
        """Ask every live worker for its final delta and wait for all of them (bounded)."""
        self.seen |= {client.id for client in self.runner.clients.all}
        for client_id in self._alive():
            self.runner.send_message(FLUSH, None, client_id)
        deadline = time.monotonic() + (self.environment.stop_timeout or 0) + FLUSH_MARGIN_S
        while time.monotonic() < deadline:
            waiting = self._alive() - self.finals
            if not waiting:
                break
            gevent.sleep(0.05)
        missing = self.missing()
        if missing:
            logger.warning("tpot-locust: no final report from worker(s): %s", ", ".join(missing))

    def missing(self) -> list[str]:
        """Workers whose final report never came: the lost ones, once a test stopped (by
        name, ``worker_names``)."""
        return sorted(self.names(client_id) for client_id in self.seen - self.finals)

    def unreachable(self) -> list[str]:
        """Workers lost as a test runs: seen, but missing from Locust's heartbeats now (a
        worker whose final report is still to come is not lost)."""
        return sorted(self.names(client_id) for client_id in self.seen - self._alive())

    def summary(self) -> Workers:
        """The workers' part of the summary: who reported, and each worker's own figures
        from its latest row (in ``attribution`` its own shares, its gaps against every
        process's windows: one whose tail is its own, a slow client, stands apart)."""
        rows = self.rows.read()
        view = workers_view({self.names(client_id): row for client_id, row in rows.items()})
        return {
            "seen": len(self.seen),
            "reported_in_full": len(self.finals),
            "missing": self.missing(),
            "read_delay_p90_ms": view["read_delay_p90_ms"],
            "read_delay_p99_ms": view["read_delay_p99_ms"],
            "stalls": view["stalls"],
            "loop_lag_max_ms": view["loop_lag_max_ms"],
            "loop_held_share": view["loop_held_share"],
            "attribution": view["attribution"],
            "ids": self.names.ids(),  # each name's Locust client id
        }


MAX_WORKER_WINDOWS = 10_000  # workers' windows kept (a run of more is no run of ours)


def _is_window(window: list[Any]) -> bool:
    """A worker's window as sent: ``[prefix, start, end]``, a short text and two int64s."""
    return (
        len(window) == 3
        and isinstance(window[0], str)
        and 0 < len(window[0]) <= 64
        and all(type(t) is int and 0 <= t < 2**63 for t in window[1:])
    )


def _differing_classes(masters: Any, user_classes: list[type]) -> list[str]:
    """The classes whose settings this process made otherwise than the master did (by
    ``settings_digests``; a master that sent none, an older one, is taken at its word)."""
    if not isinstance(masters, dict):
        return []
    own = settings_digests(user_classes)
    return sorted(
        str(name)[:100] for name, digest in masters.items() if own.get(str(name)) != digest
    )
