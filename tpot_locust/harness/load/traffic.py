"""Open-loop traffic and prefill bursts, driven from the scenario's timeline.

Locust's users are closed loop. Here one dispatcher per open-loop class per process sends
sessions at absolute arrival times (its share of the class's rate) into a bounded set of
in-flight sessions; an arrival that finds ``max_in_flight`` sessions running is counted as
dropped, never delayed. Bursts (``count`` requests of a class sent together) are sent by
the process with index 0 only; each burst request's prefill window, like every request's,
reaches every process through the cause timeline (``metrics.causes``), marked ``burst``.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import gevent
from gevent.pool import Group
from locust.env import Environment

from tpot_locust.common.clock import stamp_ns, wall_drift_ns
from tpot_locust.common.cooperation import let_streams_run
from tpot_locust.harness.users.turns import PlannedTurn
from tpot_locust.metrics.metric_set import BURST_LATE_S
from tpot_locust.scenario.arrivals import arrival_times
from tpot_locust.scenario.model import Burst, Scenario, TrafficClass
from tpot_locust.scenario.trace import TraceRequest, sessions, share_of

if TYPE_CHECKING:  # users imports the plugin, which imports this module
    from tpot_locust.harness.users.turns import PreparedTurn
    from tpot_locust.harness.users.users import ChatUser

logger = logging.getLogger(__name__)
# Burst requests are built and connected this long before their send time: long enough for
# 8 x 16k-token prompts (~30 ms of sliced work), short enough for servers' keep-alive.
BURST_PREPARE_LEAD_S = 1.0


@dataclass(frozen=True)
class ProcessShare:
    """Which slice of the open-loop traffic this process sends."""

    index: int
    count: int
    start_wall_ns: int

    def start_ns(self) -> int:
        """The traffic's start on the stamp clock (``common.clock``)."""
        return self.start_wall_ns - wall_drift_ns()


class AgentPool:
    """Idle user instances of one class, each with its own keep-alive connection."""

    def __init__(self, environment: Environment, user_class: type[ChatUser]) -> None:
        self.environment = environment
        self.user_class = user_class
        self.idle: list[ChatUser] = []
        self.all: list[ChatUser] = []

    def take(self) -> ChatUser:
        if self.idle:
            return self.idle.pop()
        if not self.user_class.host:
            self.user_class.host = self.environment.host  # Locust sets it only on spawned classes
        agent = self.user_class(self.environment)
        agent.on_start()
        self.all.append(agent)
        return agent

    def give_back(self, agent: ChatUser) -> None:
        self.idle.append(agent)

    def close(self) -> None:
        for agent in self.all:
            agent.on_stop()
        self.idle, self.all = [], []


class TrafficCounts(Protocol):
    """Where the driver counts what it could not send as planned (the recorder)."""

    def count_dropped(self, user_class: str) -> None: ...

    def count_burst(self, user_class: str, due: int, sent: int, late: int) -> None: ...


class TrafficDriver:
    def __init__(
        self,
        environment: Environment,
        scenario: Scenario,
        classes: dict[str, type[ChatUser]],
        share: ProcessShare,
        counts: TrafficCounts,
    ) -> None:
        self.environment = environment
        self.scenario = scenario
        self.classes = classes
        self.share = share
        self.counts = counts
        self.pools = {name: AgentPool(environment, cls) for name, cls in classes.items()}
        self.sessions = Group()
        self.loops = Group()

    def start(self) -> None:
        seed = (self.scenario.seed or 0) * 1_000_003 + self.share.index
        for offset, traffic in enumerate(t for t in self.scenario.classes if t.open_loop):
            if traffic.replayed:
                self.loops.spawn(self._replay, traffic)
                continue
            rng = random.Random(seed + offset)
            self.loops.spawn(self._dispatch, traffic, rng)
        if self.share.index == 0:
            for number, burst in enumerate(self.scenario.bursts):
                self.loops.spawn(self._bursts, burst, number)

    def stop_dispatching(self) -> None:
        self.loops.kill(block=True)

    def stop(self, timeout_s: float) -> None:
        """No new sessions; running ones get ``timeout_s`` to finish, then are killed."""
        self.stop_dispatching()
        self.sessions.join(timeout=timeout_s)
        self.sessions.kill(block=True)
        for pool in self.pools.values():
            pool.close()

    @property
    def in_flight(self) -> int:
        return len(self.sessions)

    def _sleep_until(self, start_ns: int, t_s: float) -> int:
        intended = start_ns + int(t_s * 1e9)
        delay = (intended - stamp_ns()) / 1e9
        if delay > 0:
            gevent.sleep(delay)
        return intended

    def _dispatch(self, traffic: TrafficClass, rng: random.Random) -> None:
        limit = max(traffic.max_in_flight // self.share.count, 1)
        in_flight = Group()
        start = self.share.start_ns()
        times = arrival_times(
            traffic.arrival,
            traffic.rate or 0.0,
            traffic.burstiness,
            self.scenario.stages,
            traffic.name,
            self.scenario.duration_s,
            rng,
            scale=1 / self.share.count,
        )
        for t_s in times:
            intended = self._sleep_until(start, t_s)
            if len(in_flight) >= limit:
                self.counts.count_dropped(traffic.name)
                continue
            session = self.sessions.spawn(self._session, traffic.name, _open_session, intended)
            in_flight.add(session)

    def _replay(self, traffic: TrafficClass) -> None:
        """This process's conversations of the trace, each started at its first turn's
        time; none is dropped (a trace is replayed whole: lateness shows as schedule lag)."""
        start = self.share.start_ns()
        mine = share_of(sessions(traffic.trace_requests), self.share.index, self.share.count)
        for turns in mine:
            t_s = turns[0].t_s / traffic.speedup
            if t_s >= self.scenario.duration_s:
                return
            self._sleep_until(start, t_s)
            self.sessions.spawn(
                self._session, traffic.name, self._trace_turns, traffic, turns, start
            )

    def _trace_turns(
        self, agent: ChatUser, traffic: TrafficClass, turns: list[TraceRequest], start_ns: int
    ) -> None:
        """One conversation of a trace: each turn at its time, with the answers before it."""
        agent.converse(self._planned_trace_turns(agent, traffic, turns, start_ns))

    def _planned_trace_turns(
        self, agent: ChatUser, traffic: TrafficClass, turns: list[TraceRequest], start_ns: int
    ) -> Iterator[PlannedTurn]:
        for number, turn in enumerate(turns):
            # every turn is an arrival of the trace: its lateness is schedule lag
            intended = self._sleep_until(start_ns, turn.t_s / traffic.speedup)
            text, tokens = agent.planner.trace_message(
                turn.prompt, turn.input_tokens, turn.blocks, turn.block_tokens
            )
            yield PlannedTurn(
                text,
                tokens,
                turn.output_tokens,
                intended,
                number + 1 == len(turns),
                turn.whole_context,
            )

    def _session(self, class_name: str, work: Callable[..., object], *args: object) -> None:
        """``work(agent, *args)`` with an idle agent of the class, given back after."""
        pool = self.pools[class_name]
        try:
            agent = pool.take()
        except Exception:  # noqa: BLE001 - e.g. no host: say so once per session, keep going
            logger.exception("tpot-locust: cannot start a %s session", class_name)
            return
        try:
            work(agent, *args)
        except Exception:  # noqa: BLE001 - requests never raise; this would be our bug
            logger.exception("tpot-locust: %s session failed", class_name)
        finally:
            pool.give_back(agent)

    def _bursts(self, burst: Burst, number: int) -> None:
        start = self.share.start_ns()
        lengths = (burst.prompt_tokens, burst.output_tokens)  # as parsed by the schema
        pool = self.pools[burst.class_name]
        for t_s in burst.times_s:
            # Built and connected shortly before the send time, yielding as they go: at
            # the send time, the prompts held every stream's reads (users.prepare_turn).
            self._sleep_until(start, t_s - BURST_PREPARE_LEAD_S)
            self.counts.count_burst(burst.class_name, burst.count, 0, 0)  # due: counted now
            prepared = [
                (agent := pool.take(), agent.prepare_turn(*lengths)) for _ in range(burst.count)
            ]
            self._sleep_until(start, t_s)
            late_ns = start + int((t_s + BURST_LATE_S) * 1e9)
            for agent, turn in prepared:
                self.sessions.spawn(self._burst_request, burst, agent, turn)
                late = stamp_ns() > late_ns  # preparing them outlasted their time
                self.counts.count_burst(burst.class_name, 0, 1, int(late))
                let_streams_run()  # one send per loop iteration: streams are read between

    def _burst_request(self, burst: Burst, agent: ChatUser, turn: PreparedTurn) -> None:
        """One burst request; its prefill window comes from the user's ``prefill_window``
        events, marked ``burst``, like every request's."""
        pool = self.pools[burst.class_name]
        try:
            agent.send_prepared(turn, burst=True)
        finally:
            pool.give_back(agent)


def _open_session(agent: ChatUser, intended_ns: int) -> None:
    agent.run_session(intended_ns)
