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
import os
import random
import time
import uuid
from typing import Any, ClassVar

import gevent
from locust import User, constant, task

from tpot_locust import plugin as _plugin  # noqa: F401  (registers our Locust listeners)
from tpot_locust.distributions import as_distribution, sample_int
from tpot_locust.events import ensure_token_timings
from tpot_locust.http_client import HTTPConnection, Origin
from tpot_locust.prompts import synthetic_text
from tpot_locust.streaming import StreamRequest, stream_request
from tpot_locust.timings import RequestTimings

API_PATHS = {"chat": "/v1/chat/completions", "completions": "/v1/completions"}


class ChatUser(User):
    """Streams ``/v1/chat/completions``; each task is one multi-turn session."""

    abstract = True
    wait_time = constant(0)

    api: ClassVar[str] = "chat"
    model: ClassVar[str | None] = None  # None: the first model listed by GET /v1/models
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
    request_name: ClassVar[str | None] = None  # name in Locust's stats; default: the path
    seed: ClassVar[int | None] = None

    _user_counter: ClassVar[int] = 0
    _models: ClassVar[dict[str, str]] = {}

    def on_start(self) -> None:
        ChatUser._user_counter += 1
        self._tag = f"{uuid.uuid4().hex[:10]}"
        self._requests_sent = 0
        seed = None if self.seed is None else self.seed * 100_003 + ChatUser._user_counter
        self.rng = random.Random(seed)
        if not self.host:
            raise ValueError(f"{type(self).__name__}: no host (set it or pass --host)")
        self.connection = HTTPConnection(
            Origin.parse(self.host), self.connect_timeout, self.idle_timeout
        )
        self._token_timings = ensure_token_timings(self.environment.events)

    def on_stop(self) -> None:
        self.connection.close()

    @task
    def session(self) -> None:
        """One conversation: each turn appends the answer and a new user message."""
        history: list[dict[str, str]] = []
        prompt_so_far = 0
        followup = self.followup_tokens if self.followup_tokens is not None else None
        for turn in range(max(int(self.turns), 1)):
            spec = self.prompt_tokens if turn == 0 or followup is None else followup
            new_tokens = sample_int(as_distribution(spec), self.rng)
            history.append({"role": "user", "content": synthetic_text(new_tokens, self.rng)})
            prompt_so_far += new_tokens
            max_tokens = sample_int(as_distribution(self.output_tokens), self.rng)
            timings, answer = self.send(history, max_tokens, prompt_so_far)
            if not timings.ok:
                return
            history.append({"role": "assistant", "content": answer})
            prompt_so_far += timings.output_tokens
            if turn + 1 < self.turns:
                gevent.sleep(as_distribution(self.think_time).sample(self.rng))

    def build_body(self, history: list[dict[str, str]], max_tokens: int) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model_name(), "stream": True}
        if self.api == "chat":
            body["messages"] = history
        else:
            body["prompt"] = "\n\n".join(message["content"] for message in history)
        body["max_tokens"] = max_tokens
        if self.ignore_eos:
            body["ignore_eos"] = True
        if self.force_min_tokens:
            body["min_tokens"] = max_tokens
        if self.include_usage:
            body["stream_options"] = {"include_usage": True}
        body.update(self.extra_body)
        return body

    def request_headers(self, request_id: str) -> dict[str, str]:
        headers = {
            "Content-Type": "application/json",
            "Accept": "text/event-stream",
            "X-Request-Id": request_id,
            **self.headers,
        }
        key = os.environ.get(self.api_key_env) if self.api_key_env else None
        if key:
            headers["Authorization"] = f"Bearer {key}"
        return headers

    def model_name(self) -> str:
        if self.model:
            return self.model
        cached = ChatUser._models.get(self.host or "")
        if cached is None:
            cached = ChatUser._models[self.host or ""] = self._first_listed_model()
        return cached

    def _first_listed_model(self) -> str:
        response, _ = self.connection.request("GET", "/v1/models", self.request_headers("models"))
        body = response.read()
        try:
            return json.loads(body)["data"][0]["id"]
        except (ValueError, KeyError, IndexError, TypeError):
            raise ValueError(f"GET /v1/models gave no model: {body[:200]!r}") from None

    def send(
        self, history: list[dict[str, str]], max_tokens: int, prompt_tokens: int
    ) -> tuple[RequestTimings, str]:
        """Stream one request, fire ``token_timings`` and Locust's ``request`` event."""
        self._requests_sent += 1
        request_id = f"{self._tag}-{self._requests_sent}"
        path = API_PATHS[self.api]
        request = StreamRequest(
            user_class=type(self).__name__,
            api=self.api,
            request_id=request_id,
            path=path,
            headers=self.request_headers(request_id),
            body=json.dumps(self.build_body(history, max_tokens)).encode(),
            prompt_tokens_requested=prompt_tokens,
            first_token_timeout=self.first_token_timeout,
            idle_timeout=self.idle_timeout,
            total_timeout=self.total_timeout,
            t_intended_ns=time.perf_counter_ns(),
        )
        timings, answer = stream_request(self.connection, request)
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


class CompletionsUser(ChatUser):
    """The same sessions over ``/v1/completions``: the history is joined into one prompt."""

    abstract = True
    api: ClassVar[str] = "completions"


class RequestFailed(Exception):
    """What Locust's failure table shows: the category first, then the detail."""

    def __init__(self, timings: RequestTimings) -> None:
        super().__init__(f"{timings.error_category}: {timings.error_message}")
