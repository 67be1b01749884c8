"""Locust user classes that hold multi-turn chat sessions over streaming APIs.

Configure by subclassing and setting class attributes (lengths are token counts: a number,
a distribution spec such as ``{"dist": "uniform", "min": 100, "max": 300}`` or a
``Distribution``), parsed once per class into one frozen ``UserSettings``::

    class Chat(ChatUser):
        host = "http://127.0.0.1:8000"
        prompt_tokens = 512
        output_tokens = {"dist": "normal", "mean": 200, "stddev": 50}
        turns = 3

A scenario's classes hold their ``UserSettings`` whole (``settings``, made from the
scenario: ``harness.load.scenario_users``); a class that holds them is run by them, not by
its attributes.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from typing import Any, ClassVar

import gevent
from locust import User, constant, task
from locust.user.task import LOCUST_STATE_STOPPING

from tpot_locust.common.cooperation import let_streams_run
from tpot_locust.common.distributions import Distribution, DistributionSpec
from tpot_locust.common.timings import RequestTimings
from tpot_locust.common.tls import client_tls_context
from tpot_locust.harness.users.conversation_picks import next_conversation
from tpot_locust.harness.users.failures import Backoff
from tpot_locust.harness.users.request_bodies import RequestBodies, request_dialect
from tpot_locust.harness.users.turn_plans import TurnPlanner
from tpot_locust.harness.users.turn_sender import TurnSender
from tpot_locust.harness.users.turns import PlannedTurn, PreparedTurn
from tpot_locust.harness.users.user_context import warn_without_plugin
from tpot_locust.harness.users.user_settings import UserSettings, class_settings
from tpot_locust.scenario.datasets import Conversation
from tpot_locust.wire.http_client import HTTPConnection, Origin
from tpot_locust.wire.sse import DEFAULT_MAX_EVENT_BYTES


class ChatUser(User):
    """Streams ``/v1/chat/completions`` (or the API named by ``api``: one of
    ``tpot_locust.apis.API_NAMES``); each task is one multi-turn session."""

    abstract = True
    wait_time = constant(0)

    api: ClassVar[str] = "chat"
    model: ClassVar[str | None] = None  # None: the first model the API's models list names
    prompt_tokens: ClassVar[DistributionSpec] = 256
    # later turns' new user message; None: prompt_tokens
    followup_tokens: ClassVar[DistributionSpec | None] = None
    output_tokens: ClassVar[DistributionSpec] = 128
    turns: ClassVar[int] = 1
    think_time: ClassVar[DistributionSpec] = 0.0  # seconds between turns (0: none)
    ignore_eos: ClassVar[bool] = True
    force_min_tokens: ClassVar[bool] = True  # send min_tokens = max_tokens (vLLM, SGLang)
    include_usage: ClassVar[bool] = True  # stream_options.include_usage
    extra_body: ClassVar[dict[str, Any]] = {}
    headers: ClassVar[dict[str, str]] = {}
    api_key_env: ClassVar[str | None] = "OPENAI_API_KEY"
    connect_timeout: ClassVar[float] = 10.0
    first_token_timeout: ClassVar[float] = 120.0
    idle_timeout: ClassVar[float] = 60.0
    total_timeout: ClassVar[float] = 600.0
    tls_ca: ClassVar[str | None] = None  # https: trust this CA file (PEM), not the system's
    tls_verify: ClassVar[bool] = True  # https: False accepts any certificate (self-signed)
    # an event (or NDJSON line) larger than this fails its request (``oversized_event``)
    max_event_bytes: ClassVar[int] = DEFAULT_MAX_EVENT_BYTES
    request_name: ClassVar[str | None] = None  # name in Locust's stats; default: the path
    seed: ClassVar[int | None] = None
    shared_prefix_tokens: ClassVar[int] = 0  # same leading text in sessions (prefix caching)
    shared_prefix_ratio: ClassVar[float] = 1.0  # fraction of sessions that use that prefix
    tokenizer: ClassVar[str | None] = None  # a local tokenizer: prompts of exact token counts
    dataset: ClassVar[Sequence[Conversation]] = ()  # sessions from a file (scenario.datasets)
    dataset_order: ClassVar[str] = "random"  # or "sequential": in file order, dealt out
    # models (or LoRA adapters) by weight, one per conversation, over ``model``; its
    # figures are kept per model too (``common.metric_groups``)
    model_split: ClassVar[dict[str, float] | None] = None

    # all of the above, parsed once (``current_settings``); a scenario's class holds its own
    settings: ClassVar[UserSettings | None] = None

    _user_counter: ClassVar[int] = 0

    @classmethod
    def current_settings(cls) -> UserSettings:
        """The class's settings: those it holds (a scenario's class, retuned by a test's
        settings), else its attributes parsed at its first use. Read at each use."""
        return cls.settings if cls.settings is not None else class_settings(cls)

    def on_start(self) -> None:
        ChatUser._user_counter += 1
        settings = self.current_settings()
        seed = None if settings.seed is None else settings.seed * 100_003 + ChatUser._user_counter
        self.rng = random.Random(seed)
        self._backoff = Backoff(self.rng)
        if not self.host:
            raise ValueError(f"{type(self).__name__}: no host (set it or pass --host)")
        request = settings.request
        self.dialect = request_dialect(type(self).__name__, request.api, request.extra_body)
        origin = Origin.parse(self.host)
        tls = None
        if origin.scheme == "https":
            tls = client_tls_context(settings.tls_ca, settings.tls_verify)
        limits = settings.limits
        self.connection = HTTPConnection(origin, limits.connect, limits.idle, tls_context=tls)
        self.planner = TurnPlanner(self)
        self.bodies = RequestBodies(self, self.dialect, self.connection)
        self.sender = TurnSender(self, self.bodies)
        warn_without_plugin(self.environment)

    def on_stop(self) -> None:
        self.connection.close()

    @task
    def session(self) -> None:
        timings = self.run_session()
        if delay := self._backoff.after(timings):
            gevent.sleep(delay)  # a failing server is backed off from, never flooded

    def run_session(
        self,
        t_intended_ns: int | None = None,
        prompt_tokens: Distribution | None = None,
        output_tokens: Distribution | None = None,
        turns: int | None = None,
    ) -> RequestTimings | None:
        """One conversation: each turn appends the answer and a new user message (a dataset
        class: its next conversation, turn by turn).

        ``t_intended_ns`` is the open-loop arrival time of the first turn; the length
        arguments override the class's (burst requests). Returns the last turn's timings.
        """
        if self.current_settings().dataset and prompt_tokens is None:
            conversation = next_conversation(self)
            return self.converse(
                self.planner.dataset_turns(conversation, t_intended_ns, output_tokens)
            )
        return self.converse(
            self.planner.session_turns(t_intended_ns, prompt_tokens, output_tokens, turns)
        )

    def converse(self, turns: Iterable[PlannedTurn]) -> RequestTimings | None:
        """The one turn loop of sessions, dataset conversations and trace replays: each
        turn's user message joins the history, the whole history is sent, the answer joins
        it. ``turns`` is consumed one turn at a time, after the previous answer came (so
        it may wait: think time, a trace's next arrival). Stops at the first failed turn,
        and before a turn once the run stopped; returns the last turn's timings (None: no
        turn)."""
        history: list[dict[str, str]] = []
        prompt_so_far = 0
        timings = None
        self.bodies.choose_model()
        for turn in turns:
            if timings is not None and self._state == LOCUST_STATE_STOPPING:
                break  # the run stopped: its drain (stop_timeout) ends sessions, starts none
            if turn.whole_context:  # a trace turn that holds its conversation (Bailian)
                history, prompt_so_far = [], 0
            history.append({"role": "user", "content": turn.text})
            prompt_so_far += turn.tokens
            timings, answer = self.send(
                history, turn.max_tokens, prompt_so_far, turn.intended_ns, keep_answer=not turn.last
            )
            if not timings.ok:
                return timings
            history.append({"role": "assistant", "content": answer})
            prompt_so_far += self.planner.count_tokens(answer, timings.output_tokens)
        return timings

    def prepare_turn(
        self, prompt_tokens: Distribution | None = None, output_tokens: Distribution | None = None
    ) -> PreparedTurn:
        """A one-turn request built and encoded ahead of its send time, yielding as it goes.

        Why: a burst of eight 16k-token prompts built at send time held the event loop for
        ~25 ms (3 ms each), and every decode stream read in this process showed the burst's
        "interference" without the server making any."""
        spec = prompt_tokens if prompt_tokens is not None else self.planner.settings.prompt_tokens
        text, tokens = self.planner.user_message(spec, first=True, pause=let_streams_run)
        history = [{"role": "user", "content": text}]
        self.bodies.choose_model()
        max_tokens = self.planner.max_tokens(output_tokens)
        let_streams_run()
        body = self.bodies.encoded(history, max_tokens)
        let_streams_run()
        self.connection.open()  # eight connects at the send time held the loop ~2 ms
        return PreparedTurn(history, max_tokens, tokens, body)

    def send_prepared(self, turn: PreparedTurn, burst: bool = False) -> RequestTimings:
        """``burst``: a request of the scenario's ``bursts:`` schedule (its prefill makes
        the burst phase)."""
        timings, _ = self.send(
            turn.history, turn.max_tokens, turn.prompt_tokens, body=turn.body, burst=burst
        )
        return timings

    def send(
        self,
        history: list[dict[str, str]],
        max_tokens: int,
        prompt_tokens: int,
        t_intended_ns: int | None = None,
        body: bytes | None = None,
        keep_answer: bool | None = None,
        burst: bool = False,
    ) -> tuple[RequestTimings, str]:
        """One request (``turn_sender``); ``body``: the request already encoded
        (``prepare_turn``); ``keep_answer``: rebuild the answer's text for a later turn
        (default: when the class has later turns)."""
        if keep_answer is None:
            keep_answer = self.planner.settings.turns > 1
        served = self.planner.served_prompt_tokens(history, prompt_tokens, self.dialect.templated)

        def encode() -> bytes:
            return body if body is not None else self.bodies.encoded(history, max_tokens)

        asked = self.bodies.asked_tokens(max_tokens)
        return self.sender.send(encode, served, t_intended_ns, keep_answer, burst, asked)


class CompletionsUser(ChatUser):
    """The same sessions over ``/v1/completions``: the history is joined into one prompt
    (any other API: set ``api`` on a ``ChatUser`` subclass)."""

    abstract = True
    api: ClassVar[str] = "completions"
