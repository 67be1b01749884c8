"""tpot-locust's events: what a locustfile can listen to, as Locust's ``locust/event.py``
documents its own. Each is an ``EventHook`` on Locust's ``events`` (and on every
``environment.events``), added when ``tpot_locust.plugin`` or the user classes are imported::

    from locust import events

    import tpot_locust.plugin  # noqa: F401

    @events.token_timings.add_listener
    def on_timings(timings, user, **kwargs):
        if timings.ok:
            print(timings.request_id, timings.ttft_ns, len(timings.token_stamps))

token_timings
    Fired once for every request a ``ChatUser`` or ``CompletionsUser`` sent, when it ended:

    - succeeded (``timings.ok``; ``error_category`` is None);
    - failed, with its category (``error_category``, e.g. ``http_4xx``, ``truncated``,
      ``timeout_idle``; ``error_message`` with any credential redacted), including a failed
      model lookup (``model_lookup``: no request was sent, ``token_stamps`` is empty);
    - cut off by the end of the run (``error_category == "interrupted"``: neither ok nor
      failed; fires no Locust ``request`` event).

    Arguments:

    - ``timings``: the request's ``tpot_locust.RequestTimings`` (see its docstring for what
      each field holds and on which clock);
    - ``user``: the ``User`` instance that sent it.

    It fires synchronously, in the user's greenlet, right after the stream ended and before
    Locust's own ``request`` event for the same request. Our recorder is one listener (it
    only queues the timings; samples are computed later, between reads). A listener:

    - must not yield (no ``gevent.sleep``, no network or file I/O that waits): while it
      runs, the user cannot be stopped cleanly and, under gevent, the event loop that stamps
      every other stream's tokens is held by whatever the listener does;
    - must not change ``timings`` or the arrays it holds: the recorder reads them after the
      event (copy first, e.g. ``list(timings.token_stamps)``);
    - should be cheap (microseconds): it runs once per request in the process that streams;
    - may raise: Locust logs the exception and the other listeners still run.

prefill_window
    Fired twice for every request a ``ChatUser`` or ``CompletionsUser`` sent (not for a
    failed model lookup): at the send, and when its prefill is over. Arguments:
    ``request_id``; ``start_perf_ns`` (just before the send, ``perf_counter_ns``);
    ``end_perf_ns`` (None at the send; then the first token event's stamp, or -1 when the
    request ended without a token, so no prefill ran); ``prompt_tokens`` (requested);
    ``burst`` (a request of the scenario's ``bursts:``). The second firing comes from the
    stream's read, while the stream goes on: the same rules as ``token_timings`` hold, and
    more strictly (no yield at all). Our recorder builds the run's ``prefill`` cause windows
    from it (docs/metrics.md, "Why the tail").
"""

from __future__ import annotations

from tpot_locust.harness.event_hooks import ensure_prefill_window, ensure_token_timings

__all__ = ["ensure_prefill_window", "ensure_token_timings"]
