"""Locustfile for the fault tests: one user class per fault of ``tests/helpers/fault_server.py``.

Class ``Fault_<fault>`` (one user each, ``fixed_count = 1``) sends its fault in an
``X-Fault`` header, ``FAULT_REQUESTS`` requests in all (default 3), then idles; when every
selected class is done the run quits by itself (``-t`` is only a safety limit; with
``FAULT_NO_QUIT=1`` only ``-t`` ends it). Pick classes by name on Locust's command line
to run a subset.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import gevent

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for ``tests.helpers``

import tpot_locust.plugin  # noqa: F401  (records and reports our metrics)
from tests.helpers.fault_catalogue import FAULTS  # noqa: E402
from tpot_locust import ChatUser  # noqa: E402

REQUESTS = int(os.environ.get("FAULT_REQUESTS", "3"))
OUTPUT_TOKENS = 6
STALL_TIMEOUT_S = 0.5  # first-token and idle timeouts; the server stalls for longer
CSV_CATCH_UP_S = 1.3

# per fault: class attributes that differ from FaultUser's
OVERRIDES: dict[str, dict[str, Any]] = {
    "slow_total": {"total_timeout": 1.0},
    # its 4 MiB event takes ~55 ms to read alone; once in a full suite run on the 2-core VM
    # it took over the 0.5 s idle timeout (counted timeout_idle): it stalls nothing, so the
    # idle timeout is kept wide of that noise
    "oversized": {"idle_timeout": 5.0},
    # two turns: the server checks that the answer it streamed comes back intact
    "utf8_split": {"turns": 2, "requests": 2 * REQUESTS},
}


class FaultUser(ChatUser):
    abstract = True
    fixed_count = 1
    model = "fault-model"
    prompt_tokens = 8
    output_tokens = OUTPUT_TOKENS
    first_token_timeout = STALL_TIMEOUT_S
    idle_timeout = STALL_TIMEOUT_S
    total_timeout = 5.0
    requests = REQUESTS
    sent = 0
    # not the default 0.0: as_distribution(0.0) raises, see test_default_think_time_*
    think_time = 0.001

    def send(self, *args: Any, **kwargs: Any) -> Any:
        self.sent += 1
        return super().send(*args, **kwargs)


_done: set[str] = set()


def _sessions_until_done(user: FaultUser) -> None:
    if user.sent < user.requests:
        user.session()
        return
    name = type(user).__name__
    if name not in _done:
        _done.add(name)
        selected = {cls.__name__ for cls in user.environment.user_classes}
        quit_when_done = os.environ.get("FAULT_NO_QUIT") != "1"  # web UI runs stop by -t
        if quit_when_done and _done >= selected and user.environment.runner is not None:
            # Locust rewrites its --csv files once a second and not at quit: let it catch up
            gevent.spawn_later(CSV_CATCH_UP_S, user.environment.runner.quit)
    gevent.sleep(3600)


FaultUser.tasks = [_sessions_until_done]  # replaces ChatUser's endless sessions


class ModelLookupEchoesKey(FaultUser):
    """No model: GET /v1/models answers 401 repeating the key (run only when named)."""

    abstract = os.environ.get("FAULT_MODEL_LOOKUP") != "1"
    model = None
    headers = {"X-Fault": "echo_key"}


class TwoTurnsDefaultThinkTime(FaultUser):
    """Two-turn sessions with ChatUser's default think time (run only when named)."""

    abstract = os.environ.get("FAULT_DEFAULT_THINK") != "1"
    think_time = ChatUser.think_time
    turns = 2
    requests = 2


for _fault in FAULTS:
    _name = f"Fault_{_fault}"
    globals()[_name] = type(
        _name,
        (FaultUser,),
        {
            "__module__": __name__,
            "headers": {"X-Fault": _fault},
            "request_name": _name,
            **OVERRIDES.get(_fault, {}),
        },
    )
