"""Our event hooks, added to Locust's global ``events`` at import.

- ``token_timings``: once per finished request, with its ``RequestTimings``; when it fires,
  with what, and what a listener may do: ``tpot_locust.events``.
- ``prefill_window``: twice per request, from its user: at the send (``request_id``,
  ``start_perf_ns``, ``end_perf_ns=None``, ``prompt_tokens``, ``burst``) and when its
  prefill is over (``end_perf_ns``: the first token's stamp, or -1 when it failed before
  one). The recorder builds the run's ``prefill`` cause windows from it.
"""

from __future__ import annotations

from locust import events
from locust.event import EventHook, Events


def _ensure(target: Events, name: str) -> EventHook:
    hook = getattr(target, name, None)
    if hook is None:
        hook = EventHook()
        setattr(target, name, hook)
    return hook


def ensure_token_timings(target: Events) -> EventHook:
    return _ensure(target, "token_timings")


def ensure_prefill_window(target: Events) -> EventHook:
    return _ensure(target, "prefill_window")


ensure_token_timings(events)
ensure_prefill_window(events)
