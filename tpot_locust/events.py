"""tpot-locust's events, declared in one place, as Locust's ``locust/event.py`` declares its
own: each an ``EventHook`` on Locust's ``events`` (and on every ``environment.events``),
added when this module is imported (by ``tpot_locust.plugin`` and the user classes)::

    from locust import events

    import tpot_locust.plugin  # noqa: F401

    @events.token_timings.add_listener
    def on_timings(timings, user, **kwargs):
        if timings.ok:
            print(timings.request_id, timings.ttft_ns, len(timings.token_stamps))

Each fires synchronously, in the user's greenlet (``prefill_window``'s second firing in the
stream's read, while the stream goes on). A listener:

- must not yield (no ``gevent.sleep``, no network or file I/O that waits): while it runs,
  the user cannot be stopped cleanly and, under gevent, the event loop that stamps every
  other stream's tokens is held by whatever the listener does (``prefill_window``: no
  yield at all);
- must not change ``timings`` or the arrays it holds: the recorder reads them after the
  event (copy first, e.g. ``list(timings.token_stamps)``);
- should be cheap (microseconds): it runs once per request in the process that streams;
- may raise: Locust logs the exception and the other listeners still run.
"""

from __future__ import annotations

from locust import events
from locust.event import EventHook, Events

from tpot_locust.common.clock import stamp_ns
from tpot_locust.metrics.causes import FAILED_END as PREFILL_FAILED

__all__ = [
    "PrefillWindow",
    "TpotEvents",
    "ensure_prefill_window",
    "ensure_token_timings",
    "tpot_events",
]


class TpotEvents:
    """Our events on one of Locust's ``Events`` (``tpot_events``): the same hooks as its
    attributes of the same names, typed."""

    token_timings: EventHook
    """
    Fired once for every request a ``ChatUser`` or ``CompletionsUser`` sent, when it ended:

    - succeeded (``timings.ok``; ``error_category`` is None);
    - failed, with its category (``error_category``, e.g. ``http_4xx``, ``truncated``,
      ``timeout_idle``; ``error_message`` with any credential redacted), including a failed
      model lookup (``model_lookup``: no request was sent, ``token_stamps`` is empty);
    - cut off by the end of the run (``error_category == "interrupted"``: neither ok nor
      failed; fires no Locust ``request`` event).

    It fires right after the stream ended and before Locust's own ``request`` event for the
    same request. Our recorder is one listener (it only queues the timings; samples are
    computed later, between reads).

    Event arguments:

    :param timings: the request's ``tpot_locust.RequestTimings`` (its docstring says what
        each field holds and on which clock)
    :param user: the ``User`` instance that sent it
    """

    prefill_window: EventHook
    """
    Fired twice for every request a ``ChatUser`` or ``CompletionsUser`` sent (not for a
    failed model lookup): at the send, and when its prefill is over (``PrefillWindow``).
    Our recorder builds the run's ``prefill`` cause windows from it (docs/metrics.md, "Why
    the tail").

    Event arguments:

    :param request_id: the request's id
    :param start_ns: just before the send (the stamp clock, ``tpot_locust.common.clock``:
        wall-clock ns that no step of the wall clock moves)
    :param end_ns: None at the send; then the first token event's stamp, or -1 when
        the request ended without a token, so no prefill ran
    :param prompt_tokens: the prompt's tokens, as requested
    :param burst: whether it is a request of the scenario's ``bursts:``
    """

    def __init__(self, target: Events) -> None:
        self.token_timings = _hook_on(target, "token_timings")
        self.prefill_window = _hook_on(target, "prefill_window")


def _hook_on(target: Events, name: str) -> EventHook:
    """``target``'s hook ``name``, added on first use (Locust's ``Events`` declares none of
    ours: they are set on it by name here, and only here)."""
    hook: EventHook | None = getattr(target, name, None)
    if hook is None:
        hook = EventHook()
        setattr(target, name, hook)
    return hook


def tpot_events(target: Events) -> TpotEvents:
    """Our events on ``target`` (Locust's ``events``, or an environment's)."""
    return TpotEvents(target)


def ensure_token_timings(target: Events) -> EventHook:
    return tpot_events(target).token_timings


def ensure_prefill_window(target: Events) -> EventHook:
    return tpot_events(target).prefill_window


class PrefillWindow:
    """One request's ``prefill_window`` events: opened now (fired at the send), closed at
    its first token (from the stream's read) or at its end without one."""

    __slots__ = ("_hook", "_prompt_tokens", "_request_id", "start_ns", "_burst", "_open")

    def __init__(self, hook: EventHook, request_id: str, prompt_tokens: int, burst: bool) -> None:
        self._hook, self._request_id, self._burst = hook, request_id, burst
        self._prompt_tokens = prompt_tokens
        self.start_ns = stamp_ns()
        self._open = True
        self._fire(None)

    def _fire(self, end_ns: int | None) -> None:
        self._hook.fire(
            request_id=self._request_id,
            start_ns=self.start_ns,
            end_ns=end_ns,
            prompt_tokens=self._prompt_tokens,
            burst=self._burst,
        )

    def first_token(self, stamp_ns: int) -> None:
        if self._open:
            self._open = False
            self._fire(stamp_ns)

    def end(self, first_stamp_ns: int | None) -> None:
        """The request ended: its first token if it had one (at the close), else none ran."""
        if self._open:
            self._open = False
            self._fire(PREFILL_FAILED if first_stamp_ns is None else first_stamp_ns)


tpot_events(events)  # on Locust's global events: a locustfile's listeners find them there
