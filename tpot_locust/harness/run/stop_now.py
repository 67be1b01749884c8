"""Stop now: the users of this process stop at once, and the run finishes with what it has.

A run asked to stop (SIGTERM, a first Ctrl-C) lets each user finish its request, for up to
the scenario's ``stop_timeout``: a long answer can hold it there for a minute. A second Ctrl-C
must end the run at once and still keep its results, so ``tpot-locust run`` then sends
``STOP_NOW_SIGNAL`` to the master (or local runner) and every worker: each kills its users,
whose requests in flight count as interrupted, and the run finishes as usual (the workers'
finals, the results folder, the report). ``kill -USR1`` to a Locust process of ours whose
stop is under way cuts its wait the same way (before a stop it kills its users too, and the
run waits out its run time with none).
"""

from __future__ import annotations

import logging
import signal
import time
from typing import Any

import gevent
from locust.env import Environment
from locust.runners import STATE_CLEANUP, STATE_STOPPING, Runner

from tpot_locust.common.child_process import STOP_NOW_SIGNAL

logger = logging.getLogger(__name__)


def install(environment: Environment) -> None:
    """Stop ``environment``'s users at once on ``STOP_NOW_SIGNAL`` (POSIX only); a second
    stop waits for the first (``stop_once``)."""
    if environment.runner is not None:
        stop_once(environment.runner, environment)
    if hasattr(signal, "SIGUSR1"):
        gevent.signal_handler(STOP_NOW_SIGNAL, stop_users_now, environment)


def stop_users_now(environment: Environment) -> None:
    """Kills every user of this process now; any later stop waits for none (a stopping
    worker also waits ``stop_timeout`` before it says it is ready again)."""
    environment.stop_timeout = 0.0
    runner = environment.runner
    if runner is None:
        return
    if users := len(runner.user_greenlets):
        logger.info("stopping %d users now", users)
        runner.user_greenlets.kill(block=False)


def stop_once(runner: Runner, environment: Environment) -> None:
    """Make ``runner.stop()`` wait for a stop already under way instead of stopping again.

    Locust's stop waits on its users (up to ``stop_timeout``) and is not re-entrant: a
    second call meanwhile (the master's "stop" message and this worker's own SIGTERM, the
    run time's end and a signal) stops each user again, and each raises "Tried to stop User
    in an unexpected state: stopping", a traceback a user on the terminal. Locust's message
    handlers call ``self.stop()``, so the instance's own method is the one place to guard.
    """
    locust_stop = runner.stop

    def stop(*args: Any, **kwargs: Any) -> None:  # a master's: send_stop_to_client
        if runner.state not in (STATE_CLEANUP, STATE_STOPPING):
            locust_stop(*args, **kwargs)
            return
        wait_for_users(runner, environment)

    runner.stop = stop  # type: ignore[method-assign]


def wait_for_users(runner: Runner, environment: Environment) -> None:
    """Until ``runner``'s users are gone, ``stop_timeout`` and 2 s at most."""
    deadline = time.monotonic() + (environment.stop_timeout or 0) + 2
    while runner.user_count and time.monotonic() < deadline:
        gevent.sleep(0.05)


__all__ = ["install", "stop_once", "stop_users_now", "wait_for_users"]
