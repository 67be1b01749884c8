"""One turn on the wire: the request streamed, read and recorded (our ``token_timings`` and
Locust's ``request`` event), a request the stop cut or the model lookup failed counted too.

Why its own room: ``ChatUser`` is what Locust drives; sending a turn is the wire's work and
the recorder's events, the same for sessions, dataset conversations, traces and bursts
(issue 47, item 4).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any, Protocol

import gevent

from tpot_locust.common.clock import stamp_ns
from tpot_locust.common.errors import INTERRUPTED, MODEL_LOOKUP, StreamError
from tpot_locust.common.timings import RequestTimings
from tpot_locust.events import PrefillWindow, ensure_prefill_window, ensure_token_timings
from tpot_locust.harness.users.failures import RequestFailed, ended_unstreamed
from tpot_locust.harness.users.request_bodies import RequestBodies
from tpot_locust.harness.users.user_context import user_context
from tpot_locust.harness.users.user_settings import UserSettings
from tpot_locust.metrics.stalls import PROCESS_TAG
from tpot_locust.wire.http_client import ReadTimeout
from tpot_locust.wire.streaming import StreamRequest, redact, stream_request


class SendUser(Protocol):
    """What sending reads of a user: its class's settings, read at each send (a test's
    settings retune the class), and where it runs (its events)."""

    @property
    def environment(self) -> Any: ...
    def current_settings(self) -> UserSettings: ...


class TurnSender:
    """Sends one user's turns over its connection (``bodies.connection``); the user is
    what the events name (``user=``), its class what the figures are kept under."""

    def __init__(self, user: SendUser, bodies: RequestBodies) -> None:
        self.user = user
        self.bodies = bodies
        self._tag = f"{PROCESS_TAG}{uuid.uuid4().hex[:6]}"  # which process sent it, first
        self._requests_sent = 0
        events = user.environment.events
        self._token_timings = ensure_token_timings(events)
        self._prefill_window = ensure_prefill_window(events)
        self._live_streams = user_context(user.environment).live_streams

    def send(
        self,
        encode: Callable[[], bytes],
        prompt_tokens: int,
        t_intended_ns: int | None,
        keep_answer: bool,
        burst: bool,
        max_tokens: int | None = None,
    ) -> tuple[RequestTimings, str]:
        """Stream one request (its body from ``encode``, which may look the model up),
        fire ``token_timings`` and Locust's ``request`` event; ``keep_answer``: rebuild the
        answer's text (a later turn needs it); ``burst``: a request of the scenario's
        ``bursts:`` (its prefill makes the burst phase); ``max_tokens``: the output tokens
        it asks for (more in its answer: a server that ignores it, counted)."""
        user, bodies, connection = self.user, self.bodies, self.bodies.connection
        settings = user.current_settings()
        limits = settings.limits
        self._requests_sent += 1
        request_id = f"{self._tag}-{self._requests_sent}"
        path = bodies.dialect.path
        intended_ns = t_intended_ns or stamp_ns()
        try:
            body = encode()
        except gevent.GreenletExit:  # the stop came during the model lookup: counted too
            self._count_interrupted(request_id, intended_ns)
            raise
        except (StreamError, ReadTimeout, ValueError) as error:
            # The model lookup (GET /v1/models) failed: this request fails with its reason.
            detail = f"model lookup: {getattr(error, 'message', error)}"
            timings = ended_unstreamed(
                self._unsent(request_id, intended_ns, stamp_ns()),
                getattr(error, "category", MODEL_LOOKUP),
                redact(detail, bodies.headers(request_id)),
            )
            connection.close()
            answer = ""
        else:
            prefill = PrefillWindow(self._prefill_window, request_id, prompt_tokens, burst)
            cut: list[RequestTimings] = []  # what came before the stop, if it cut the stream
            request = StreamRequest(
                user_class=type(user).__name__,
                api=settings.request.api,
                request_id=request_id,
                path=path,
                headers=bodies.headers(request_id),
                body=body,
                prompt_tokens_requested=prompt_tokens,
                first_token_timeout=limits.first_token,
                idle_timeout=limits.idle,
                total_timeout=limits.total,
                t_intended_ns=intended_ns,
                on_first_token=prefill.first_token,
                max_event_bytes=settings.request.max_event_bytes,
                live=self._live_streams,
                model=bodies.session_model,
                on_cut=cut.append,
            )
            try:
                # the answer's text is needed only to continue the conversation
                timings, answer = stream_request(connection, request, want_text=keep_answer)
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
        timings.max_tokens = max_tokens
        timings.refuse_out_of_range()  # nothing out of range reaches an int64 array
        self._token_timings.fire(timings=timings, user=user)
        user.environment.events.request.fire(
            request_type="POST",
            name=settings.request.request_name or path,
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
        self.bodies.connection.close()
        timings = cut or self._unsent(request_id, intended_ns, sent_ns or stamp_ns())
        ended = ended_unstreamed(timings, INTERRUPTED, "stopped by the end of the run")
        ended.refuse_out_of_range()
        self._token_timings.fire(timings=ended, user=self.user)

    def _unsent(self, request_id: str, intended_ns: int, sent_ns: int) -> RequestTimings:
        return RequestTimings(
            type(self.user).__name__,
            self.user.current_settings().request.api,
            request_id,
            intended_ns,
            sent_ns,
            model=self.bodies.session_model,
        )
