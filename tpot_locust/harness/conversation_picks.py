"""Which of a dataset's conversations a user takes next: at random, or in order over this
process's share of the run's processes (each worker a share: no two take the same entry).

Why its own room: taking the next entry waits for the master's plan on a worker, which is
not the user's job (``ChatUser`` plans and sends turns; issue 47, item 4).
"""

from __future__ import annotations

import logging
import time
from typing import Any

import gevent

from tpot_locust.harness.turns import dataset_position
from tpot_locust.harness.user_context import ALONE, user_context
from tpot_locust.scenario.datasets import Conversation

logger = logging.getLogger(__name__)
PLAN_WAIT_S = 10.0  # a worker's sequential dataset waits this long for its share


def next_conversation(user: Any) -> Conversation:
    """``user``'s next conversation of its class's dataset (``dataset_order``)."""
    if user.dataset_order != "sequential":
        return user.rng.choice(user.dataset)  # type: ignore[no-any-return]
    share = process_share(user.environment)
    cls = type(user)
    taken = cls.__dict__.get("_dataset_taken", 0)
    cls._dataset_taken = taken + 1  # shared by the class's users in this process
    return user.dataset[dataset_position(taken, *share, len(user.dataset))]  # type: ignore[no-any-return]


def process_share(environment: Any) -> tuple[int, int]:
    """This process's share (``user_context``); a worker's users that start before the
    plan wait for it (bounded), rather than take the first entries as if alone."""
    context = user_context(environment)
    deadline = time.monotonic() + PLAN_WAIT_S
    while context.process_share is None and time.monotonic() < deadline:
        gevent.sleep(0.01)
    if context.process_share is None:
        logger.error(
            "tpot-locust: no plan from the master in %g s: dataset entries "
            "taken as if this worker were alone",
            PLAN_WAIT_S,
        )
        context.process_share = ALONE
    return context.process_share
