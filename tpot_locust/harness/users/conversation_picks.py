"""Which of a dataset's conversations a user takes next: at random, or in order over this
process's share of the run's processes (each worker a share: no two take the same entry).

Why its own room: taking the next entry waits for the master's plan on a worker, which is
not the user's job (``ChatUser`` plans and sends turns; issue 47, item 4).
"""

from __future__ import annotations

import logging
import random
import time
import weakref
from typing import Any, Protocol

import gevent

from tpot_locust.harness.users.turns import dataset_position
from tpot_locust.harness.users.user_context import ALONE, user_context
from tpot_locust.harness.users.user_settings import UserSettings
from tpot_locust.scenario.datasets import Conversation

logger = logging.getLogger(__name__)
PLAN_WAIT_S = 10.0  # a worker's sequential dataset waits this long for its share
# a sequential dataset's entries taken in this process, by user class (its users share it)
_TAKEN: weakref.WeakKeyDictionary[type, int] = weakref.WeakKeyDictionary()


class DatasetUser(Protocol):
    """What picking reads of a user: its class's dataset and order, its random stream and
    where it runs."""

    rng: random.Random

    @property
    def environment(self) -> Any: ...
    def current_settings(self) -> UserSettings: ...


def next_conversation(user: DatasetUser) -> Conversation:
    """``user``'s next conversation of its class's dataset (``dataset_order``)."""
    settings = user.current_settings()
    dataset = settings.dataset
    if settings.dataset_order != "sequential":
        return user.rng.choice(dataset)
    share = process_share(user.environment)
    cls = type(user)
    taken = _TAKEN.get(cls, 0)
    _TAKEN[cls] = taken + 1
    return dataset[dataset_position(taken, *share, len(dataset))]


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
