"""The ``token_timings`` event: fired once per finished request with its timings.

It is added to Locust's global ``events`` object at import, so a locustfile can listen as
it does to Locust's own ``request`` event::

    from locust import events

    @events.token_timings.add_listener
    def on_timings(timings, user, **kwargs):
        ...  # timings is a tpot_locust.timings.RequestTimings

Our recorder is one listener; an exporter or a per-request log can be another.
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
