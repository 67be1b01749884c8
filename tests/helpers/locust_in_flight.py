"""A scenario on plain Locust (``TPOT_SCENARIO``, as ``locustfiles/scenario.py``) that also
writes every request's send and end, as wall-clock seconds, to ``IN_FLIGHT_FILE`` (one JSON
line a request, from a ``token_timings`` listener): what the client had in flight at any
moment, to hold against the server's own count of running requests."""

import json
import os

from locust import events

from tpot_locust.harness.entry.scenario_locustfile import *  # noqa: F403

_sink = open(os.environ["IN_FLIGHT_FILE"], "w") if os.environ.get("IN_FLIGHT_FILE") else None  # noqa: SIM115


@events.token_timings.add_listener
def _keep_send_and_end(timings, **_):
    if _sink is None or timings.error_category == "model_lookup":
        return  # a failed model lookup sent no request
    # a request the stop cut off carries the stop as its send: its intended time (closed
    # loop: when it was built, just before the send) is when it went out
    cut = timings.error_category == "interrupted"
    send_ns = timings.t_intended_ns if cut else timings.t_send_ns
    record = {
        "id": timings.request_id,
        "class": timings.user_class,
        "send_s": send_ns / 1e9,  # stamps are wall-clock ns (the stamp clock)
        "end_s": timings.t_end_ns / 1e9,
        "first_s": timings.token_stamps[0] / 1e9 if timings.token_stamps else None,
        "error": timings.error_category,
        "prompt": timings.prompt_tokens_reported,
    }
    _sink.write(json.dumps(record) + "\n")
    _sink.flush()
