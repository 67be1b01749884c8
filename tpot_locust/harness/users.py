"""Locust user classes that hold multi-turn chat sessions over streaming APIs.

Configure by subclassing and setting class attributes (lengths are token counts: a number
or a distribution spec such as ``{"dist": "uniform", "min": 100, "max": 300}``)::

    class Chat(ChatUser):
        host = "http://127.0.0.1:8000"
        prompt_tokens = 512
        output_tokens = {"dist": "normal", "mean": 200, "stddev": 50}
        turns = 3
"""

from __future__ import annotations

import json
import logging
import random
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, ClassVar

import gevent
from locust import User, constant, task
from locust.user.task import LOCUST_STATE_STOPPING

from tpot_locust.apis import dialect_named
from tpot_locust.apis.dialect import BodyOptions, Dialect, refuse_several_choices
from tpot_locust.common import env_vars
from tpot_locust.common.cooperation import let_streams_run
from tpot_locust.common.distributions import as_distribution, sample_int
from tpot_locust.common.errors import INTERRUPTED, MODEL_LOOKUP, StreamError
from tpot_locust.common.timings import RequestTimings
from tpot_locust.common.tls import client_tls_context
from tpot_locust.common.tokens import Tokenizer, load_tokenizer
from tpot_locust.events import PrefillWindow, ensure_prefill_window, ensure_token_timings
from tpot_locust.harness.conversation_picks import next_conversation
from tpot_locust.harness.failures import Backoff, RequestFailed, ended_unstreamed
from tpot_locust.harness.model_lookup import first_listed_model, lookup_timeout
from tpot_locust.harness.model_split import ModelSplit
from tpot_locust.harness.turns import PlannedTurn, PreparedTurn
from tpot_locust.harness.user_context import user_context, warn_without_plugin
from tpot_locust.metrics.stalls import PROCESS_TAG
from tpot_locust.scenario.datasets import Conversation
from tpot_locust.scenario.prompts import WORDS, blocks_text, synthetic_text
from tpot_locust.wire.http_client import HTTPConnection, Origin, ReadTimeout
from tpot_locust.wire.sse import DEFAULT_MAX_EVENT_BYTES
from tpot_locust.wire.streaming import StreamRequest, redact, stream_request

logger = logging.getLogger(__name__)


class ChatUser(User):
    """Streams ``/v1/chat/completions`` (or the API named by ``api``: one of
    ``tpot_locust.apis.API_NAMES``); each task is one multi-turn session."""

    abstract = True
    wait_time = constant(0)

    api: ClassVar[str] = "chat"
    model: ClassVar[str | None] = None  # None: the first model the API's models list names
    prompt_tokens: ClassVar[Any] = 256
    followup_tokens: ClassVar[Any] = None  # later turns' new user message; None: prompt_tokens
    output_tokens: ClassVar[Any] = 128
    turns: ClassVar[int] = 1
    think_time: ClassVar[Any] = 0.0  # seconds between turns (number or distribution)
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

    _user_counter: ClassVar[int] = 0
    _models: ClassVar[dict[tuple[str, str], str]] = {}
    # set on each class on first use, read through its own __dict__ (never a parent's)
    _dataset_taken: ClassVar[int]  # a sequential dataset's entries taken in this process
    _prefix_text: ClassVar[str]  # the class's shared prefix (shared_prefix_tokens)
    _model_split: ClassVar[ModelSplit]  # deals out model_split in this process

    def on_start(self) -> None:
        ChatUser._user_counter += 1
        self._tag = f"{PROCESS_TAG}{uuid.uuid4().hex[:6]}"  # which process sent it, first
        self._requests_sent = 0
        self._session_model: str | None = None  # this conversation's, from model_split
        seed = None if self.seed is None else self.seed * 100_003 + ChatUser._user_counter
        self.rng = random.Random(seed)
        self._backoff = Backoff(self.rng)
        if not self.host:
            raise ValueError(f"{type(self).__name__}: no host (set it or pass --host)")
        self.dialect: Dialect = dialect_named(self.api)
        refuse_several_choices(type(self).__name__, self.extra_body)
        origin = Origin.parse(self.host)
        tls = client_tls_context(self.tls_ca, self.tls_verify) if origin.scheme == "https" else None
        self.connection = HTTPConnection(
            origin, self.connect_timeout, self.idle_timeout, tls_context=tls
        )
        self._token_timings = ensure_token_timings(self.environment.events)
        self._prefill_window = ensure_prefill_window(self.environment.events)
        self._live_streams = user_context(self.environment).live_streams
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
        prompt_tokens: Any = None,
        output_tokens: Any = None,
        turns: int | None = None,
    ) -> RequestTimings | None:
        """One conversation: each turn appends the answer and a new user message (a dataset
        class: its next conversation, turn by turn).

        ``t_intended_ns`` is the open-loop arrival time of the first turn; the length
        arguments override the class's (burst requests). Returns the last turn's timings.
        """
        if self.dataset and prompt_tokens is None:
            return self.converse(self._dataset_turns(t_intended_ns, output_tokens))
        return self.converse(
            self._session_turns(t_intended_ns, prompt_tokens, output_tokens, turns)
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
        self._choose_model()
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
            prompt_so_far += self.count_tokens(answer, timings.output_tokens)
        return timings

    def _session_turns(
        self, t_intended_ns: int | None, prompt_tokens: Any, output_tokens: Any, turns: int | None
    ) -> Iterator[PlannedTurn]:
        """The class's synthetic turns: the first of ``prompt_tokens`` (else the class's),
        later ones of ``followup_tokens``, think time between."""
        first_spec = prompt_tokens if prompt_tokens is not None else self.prompt_tokens
        followup = self.followup_tokens
        count = max(int(turns or self.turns), 1)
        for turn in range(count):
            if turn and self.think_time:
                gevent.sleep(as_distribution(self.think_time).sample(self.rng))
            spec = first_spec if turn == 0 or followup is None else followup
            text, new_tokens = self._user_message(spec, first=turn == 0, pause=let_streams_run)
            yield PlannedTurn(
                text,
                new_tokens,
                self._max_tokens(output_tokens),
                t_intended_ns if turn == 0 else None,
                turn + 1 == count,
            )

    def _dataset_turns(
        self, t_intended_ns: int | None, output_tokens: Any
    ) -> Iterator[PlannedTurn]:
        """The dataset's next conversation, its user turns in order, each turn's answer the
        server's (its recorded answer's length, or the length given with it, is
        ``max_tokens``), think time between."""
        turns = next_conversation(self)
        for number, turn in enumerate(turns):
            if number and self.think_time:
                gevent.sleep(as_distribution(self.think_time).sample(self.rng))
            if turn.output_tokens is not None:
                max_tokens = turn.output_tokens
            elif turn.answer is not None:
                max_tokens = max(self.count_tokens(turn.answer, len(turn.answer.split())), 1)
            else:
                max_tokens = self._max_tokens(output_tokens)
            tokens = self.count_tokens(turn.text, len(turn.text.split()))
            yield PlannedTurn(
                turn.text,
                tokens,
                max_tokens,
                t_intended_ns if number == 0 else None,
                number + 1 == len(turns),
            )

    def _user_message(
        self, spec: Any, first: bool, pause: Callable[[], None] | None = None
    ) -> tuple[str, int]:
        """A new user message of ``spec`` tokens (the shared prefix first, if any)."""
        new_tokens = sample_int(as_distribution(spec), self.rng)
        prefix = self._shared_prefix() if first else ""
        if (exact := self._tokenizer()) is not None:  # exactly new_tokens after the prefix
            text = exact.text_of(new_tokens, self.rng, WORDS, prefix, pause)
            return text, new_tokens + (exact.count_prefix(prefix) if prefix else 0)
        text = synthetic_text(new_tokens, self.rng, pause)
        if prefix:
            return f"{prefix} {text}", new_tokens + self.shared_prefix_tokens
        return text, new_tokens

    def _tokenizer(self) -> Tokenizer | None:
        return load_tokenizer(self.tokenizer) if self.tokenizer else None

    def served_prompt_tokens(self, history: list[dict[str, str]], counted: int) -> int:
        """The prompt as the server counts it: with a tokenizer that has a chat template,
        and an API whose server applies it, the messages' tokens plus those the template
        adds (``Tokenizer.template_tokens``); else ``counted``, the messages' own."""
        exact = self._tokenizer() if self.dialect.templated else None
        if exact is None or not history:
            return counted
        added = exact.template_tokens(tuple(message["role"] for message in history))
        return counted if added is None else counted + added

    def count_tokens(self, text: str, estimate: int) -> int:
        """The tokens of ``text`` by the class's tokenizer; without one, ``estimate``."""
        exact = self._tokenizer()
        return exact.count(text) if exact is not None else estimate

    def trace_message(
        self,
        prompt: str | None,
        input_tokens: int | None,
        blocks: tuple[int, ...] = (),
        block_tokens: int = 0,
    ) -> tuple[str, int]:
        """A trace's user message: its own text, synthetic text of its length, or (a
        published trace's prefix blocks) the text of each block in turn, so that requests
        sharing leading blocks share that much leading text, in every process."""
        if prompt is not None:  # without a tokenizer the simulator's count; a server's differs
            return prompt, self.count_tokens(prompt, len(prompt.split()))
        tokens = int(input_tokens or 1)
        if blocks and block_tokens:
            text = blocks_text(blocks, block_tokens, tokens, self._tokenizer())
            return text, self.count_tokens(text, tokens)
        if (exact := self._tokenizer()) is not None:
            return exact.text_of(tokens, self.rng, WORDS, pause=let_streams_run), tokens
        return synthetic_text(tokens, self.rng, let_streams_run), tokens

    def _max_tokens(self, output_tokens: Any = None) -> int:
        length = output_tokens if output_tokens is not None else self.output_tokens
        return sample_int(as_distribution(length), self.rng)

    def prepare_turn(self, prompt_tokens: Any = None, output_tokens: Any = None) -> PreparedTurn:
        """A one-turn request built and encoded ahead of its send time, yielding as it goes.

        Why: a burst of eight 16k-token prompts built at send time held the event loop for
        ~25 ms (3 ms each), and every decode stream read in this process showed the burst's
        "interference" without the server making any."""
        spec = prompt_tokens if prompt_tokens is not None else self.prompt_tokens
        text, tokens = self._user_message(spec, first=True, pause=let_streams_run)
        history = [{"role": "user", "content": text}]
        self._choose_model()
        max_tokens = self._max_tokens(output_tokens)
        let_streams_run()
        body = json.dumps(self.build_body(history, max_tokens)).encode()
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

    def _shared_prefix(self) -> str:
        """The class's common prefix (same text for every session of the class), or ""."""
        if not self.shared_prefix_tokens or self.rng.random() >= self.shared_prefix_ratio:
            return ""
        cls = type(self)
        prefix = cls.__dict__.get("_prefix_text")
        if prefix is None:
            exact, seeded = self._tokenizer(), random.Random(cls.__name__)
            prefix = (
                exact.text_of(self.shared_prefix_tokens, seeded, WORDS)
                if exact
                else synthetic_text(self.shared_prefix_tokens, seeded)
            )
            cls._prefix_text = prefix
        return prefix

    def _choose_model(self) -> None:
        """The next conversation's model, when the class splits its traffic over models;
        one round robin per class in this process, begun at this worker's index."""
        if not self.model_split:
            self._session_model = None
            return
        cls = type(self)
        split = cls.__dict__.get("_model_split")
        if split is None or split.weights != self.model_split:  # first, or retuned
            share = user_context(self.environment).process_share
            split = cls._model_split = ModelSplit(self.model_split, share[0] if share else 0)
        self._session_model = split.pick()

    def build_body(self, history: list[dict[str, str]], max_tokens: int) -> dict[str, Any]:
        """The request in the API's own words (``apis``), then ``extra_body`` over it."""
        dialect = self.dialect
        model = self._session_model
        if model is None and (dialect.models_path or self.model):
            model = self.model_name()
        options = BodyOptions(
            model=model,
            max_tokens=max_tokens,
            ignore_eos=self.ignore_eos,
            force_min_tokens=self.force_min_tokens,
            include_usage=self.include_usage,
        )
        body = dialect.body(history, options)
        body.update(self.extra_body)
        return body

    def request_headers(self, request_id: str) -> dict[str, str]:
        key = env_vars.named_by_user(self.api_key_env) if self.api_key_env else None
        return {
            "Content-Type": "application/json",
            "Accept": self.dialect.media_types[0],
            "X-Request-Id": request_id,
            **self.dialect.headers(key or None),
            **self.headers,
        }

    def model_name(self) -> str:
        if self.model:
            return self.model
        where = (self.host or "", self.dialect.models_path or "")
        cached = ChatUser._models.get(where)
        if cached is None:
            cached = ChatUser._models[where] = self._first_listed_model()
        return cached

    def _first_listed_model(self) -> str:
        """Raises ``StreamError`` (``model_lookup``)."""
        return first_listed_model(
            self.connection,
            self.dialect,
            self.request_headers("models"),
            lookup_timeout(self.first_token_timeout),
        )

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
        """Stream one request, fire ``token_timings`` and Locust's ``request`` event;
        ``body``: the request already encoded (``prepare_turn``); ``keep_answer``: rebuild
        the answer's text for a later turn (default: when the class has later turns)."""
        if keep_answer is None:
            keep_answer = self.turns > 1
        prompt_tokens = self.served_prompt_tokens(history, prompt_tokens)
        self._requests_sent += 1
        request_id = f"{self._tag}-{self._requests_sent}"
        path = self.dialect.path
        intended_ns = t_intended_ns or time.perf_counter_ns()
        try:
            if body is None:
                body = json.dumps(self.build_body(history, max_tokens)).encode()
        except gevent.GreenletExit:  # the stop came during the model lookup: counted too
            self._count_interrupted(request_id, intended_ns)
            raise
        except (StreamError, ReadTimeout, ValueError) as error:
            # The model lookup (GET /v1/models) failed: this request fails with its reason.
            detail = f"model lookup: {getattr(error, 'message', error)}"
            timings = ended_unstreamed(
                self._unsent(request_id, intended_ns, time.perf_counter_ns()),
                getattr(error, "category", MODEL_LOOKUP),
                redact(detail, self.request_headers(request_id)),
            )
            self.connection.close()
            answer = ""
        else:
            prefill = PrefillWindow(self._prefill_window, request_id, prompt_tokens, burst)
            cut: list[RequestTimings] = []  # what came before the stop, if it cut the stream
            request = StreamRequest(
                user_class=type(self).__name__,
                api=self.api,
                request_id=request_id,
                path=path,
                headers=self.request_headers(request_id),
                body=body,
                prompt_tokens_requested=prompt_tokens,
                first_token_timeout=self.first_token_timeout,
                idle_timeout=self.idle_timeout,
                total_timeout=self.total_timeout,
                t_intended_ns=intended_ns,
                on_first_token=prefill.first_token,
                max_event_bytes=self.max_event_bytes,
                live=self._live_streams,
                model=self._session_model,
                on_cut=cut.append,
            )
            try:
                # the answer's text is needed only to continue the conversation
                timings, answer = stream_request(self.connection, request, want_text=keep_answer)
            except gevent.GreenletExit:
                stamps = cut[0].token_stamps if cut else None
                prefill.end(stamps[0] if stamps else None)
                self._count_interrupted(
                    request_id, intended_ns, prefill.start_ns, cut[0] if cut else None
                )
                raise
            except BaseException:  # never expected (requests do not raise): no window left open
                prefill.end(None)
                raise
            prefill.end(timings.token_stamps[0] if timings.token_stamps else None)
        timings.scheduled = t_intended_ns is not None
        timings.refuse_out_of_range()  # nothing out of range reaches an int64 array
        self._token_timings.fire(timings=timings, user=self)
        self.environment.events.request.fire(
            request_type="POST",
            name=self.request_name or path,
            response_time=timings.e2e_ns / 1e6,
            response_length=timings.output_tokens,
            response=None,
            context={"request_id": request_id, "user_class": timings.user_class},
            exception=None if timings.ok else RequestFailed(timings),
            url=path,
        )
        return timings, answer

    def _count_interrupted(
        self,
        request_id: str,
        intended_ns: int,
        sent_ns: int | None = None,
        cut: RequestTimings | None = None,
    ) -> None:
        """A request the stop killed (mid-stream: ``sent_ns``, its send; ``cut``: what
        came before the stop): counted, with its token events, so the totals still add up
        and its gaps inside the window count (docs/metrics.md, "The window")."""
        self.connection.close()
        timings = cut or self._unsent(request_id, intended_ns, sent_ns or time.perf_counter_ns())
        ended = ended_unstreamed(timings, INTERRUPTED, "stopped by the end of the run")
        ended.refuse_out_of_range()
        self._token_timings.fire(timings=ended, user=self)

    def _unsent(self, request_id: str, intended_ns: int, sent_ns: int) -> RequestTimings:
        return RequestTimings(
            type(self).__name__,
            self.api,
            request_id,
            intended_ns,
            sent_ns,
            model=self._session_model,
        )


class CompletionsUser(ChatUser):
    """The same sessions over ``/v1/completions``: the history is joined into one prompt
    (any other API: set ``api`` on a ``ChatUser`` subclass)."""

    abstract = True
    api: ClassVar[str] = "completions"
