"""What a run hands the users of its process: one ``UserContext`` per Locust environment.

The run (``run_state.RunState``) writes it, the users (``users.ChatUser``) read it: the one
channel between them, in place of class attributes set from outside. A user class run
without ``tpot_locust.plugin`` finds the defaults (alone in its process, no live counts).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from tpot_locust.wire.streaming import LiveStreams

ALONE = (0, 1)  # the process share of a process that is the run's only load process

logger = logging.getLogger(__name__)
_PLUGIN_HINT = (
    "tpot-locust: the plugin is not loaded, so no per-token timing is recorded or reported: "
    "add `import tpot_locust.plugin` to your locustfile"
)


@dataclass
class UserContext:
    """This process's part of the run, as its users need it."""

    # this process's place among the run's load processes (index, count): a sequential
    # dataset is dealt out among them, every count-th entry from index (set at each test's
    # start; None on a worker until its master's plan came)
    process_share: tuple[int, int] | None = ALONE
    # the recorder's live token counts (tokens/s per interval): each stream registers there
    live_streams: LiveStreams | None = None


def user_context(environment: Any) -> UserContext:
    """The context of ``environment`` (made on first use)."""
    context: UserContext | None = getattr(environment, "tpot_user_context", None)
    if context is None:
        context = UserContext()
        environment.tpot_user_context = context
    return context


def warn_without_plugin(environment: Any) -> None:
    """The user classes stream without the plugin, but nothing would record them: say so,
    once per process (the plugin is imported by the locustfile, never as a side effect)."""
    if getattr(environment, "tpot_state", None) is None and not getattr(
        environment, "tpot_plugin_warned", False
    ):
        environment.tpot_plugin_warned = True
        logger.error(_PLUGIN_HINT)
