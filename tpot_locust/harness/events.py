"""The ``token_timings`` event hook, added to Locust's global ``events`` at import.

When it fires, with what, and what a listener may do: ``tpot_locust.events``.
"""

from __future__ import annotations

from locust import events
from locust.event import EventHook, Events


def ensure_token_timings(target: Events) -> EventHook:
    hook = getattr(target, "token_timings", None)
    if hook is None:
        hook = EventHook()
        target.token_timings = hook
    return hook


ensure_token_timings(events)
