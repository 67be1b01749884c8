"""This process's measuring parts, built together once and whole: the loop probe and GC
watch the recorder reads, the recorder, the collector of totals, the server's samplers, what
the users are handed and the streak of client errors that stops a run. ``RunState`` runs
them through each test; nothing here is filled in later."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tpot_locust.harness.users.failures import ClientErrorStreak
from tpot_locust.harness.users.process_context import UserContext
from tpot_locust.harness.users.user_context import user_context
from tpot_locust.harness.watch.gc_watch import CollectorWatch
from tpot_locust.harness.watch.loop_probe import LagProbe
from tpot_locust.harness.watch.sampling import ServerSampling
from tpot_locust.metrics.collector import Collector
from tpot_locust.metrics.recorder import Recorder


@dataclass(frozen=True)
class ProcessParts:
    probe: LagProbe  # this process's loop, once it streams
    collections: CollectorWatch  # names the stalls the collector caused
    recorder: Recorder
    collector: Collector  # the totals (a master's or local runner's)
    sampling: ServerSampling  # the server's own metrics, while a test runs
    users: UserContext  # what the users are handed: their share, the recorder's live counts
    client_errors: ClientErrorStreak


def build_parts(environment: object, stop_run: Callable[[str], None]) -> ProcessParts:
    """The parts of the process that ``environment`` runs in; ``stop_run`` ends the run when
    the client's own errors go on (``users.failures``)."""
    probe, collections = LagProbe(), CollectorWatch()
    recorder = Recorder(probe, collections)
    users = user_context(environment)
    users.live_streams = recorder.token_flow
    return ProcessParts(
        probe=probe,
        collections=collections,
        recorder=recorder,
        collector=Collector(),
        sampling=ServerSampling(recorder.causes.add_all),
        users=users,
        client_errors=ClientErrorStreak(stop_run),
    )
