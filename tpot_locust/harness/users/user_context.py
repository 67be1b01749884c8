"""What a run hands the users of its process, as the users ask for it (``users.ChatUser``).

The run (``run_state.RunState``) writes each Environment's ``UserContext``
(``process_context``), the users read it: the one channel between them, in place of class
attributes set from outside. A user class run without ``tpot_locust.plugin`` finds the
defaults (alone in its process, no live counts).
"""

from __future__ import annotations

import logging

from tpot_locust.harness.users.process_context import ALONE, UserContext, context_of

__all__ = ["ALONE", "UserContext", "user_context", "warn_without_plugin"]

logger = logging.getLogger(__name__)
_PLUGIN_HINT = (
    "tpot-locust: the plugin is not loaded, so no per-token timing is recorded or reported: "
    "add `import tpot_locust.plugin` to your locustfile"
)


def user_context(environment: object) -> UserContext:
    """The users' context of ``environment`` (made on first use)."""
    return context_of(environment).users


def warn_without_plugin(environment: object) -> None:
    """The user classes stream without the plugin, but nothing would record them: say so,
    once per process (the plugin is imported by the locustfile, never as a side effect)."""
    context = context_of(environment)
    if not context.recorded and not context.plugin_warned:
        context.plugin_warned = True
        logger.error(_PLUGIN_HINT)
