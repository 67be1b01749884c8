"""What tpot-locust keeps for one Locust Environment: the users' part of the run and whether
our plugin records it.

Locust builds our users with its ``Environment`` alone, so each Environment's context hangs
on it, reached through ``context_of``: the one place that reads or sets our field on
Locust's Environment (which declares none). The run itself (``run_state.RunState``) is kept
by its owner, ``listeners``; the scenario by ``scenario_in_use``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tpot_locust.wire.streaming import LiveStreams

ALONE = (0, 1)  # the process share of a process that is the run's only load process


@dataclass
class UserContext:
    """This process's part of the run, as its users need it: the run (``RunState``) writes
    it, the users read it; a user class run without the plugin finds these defaults."""

    # this process's place among the run's load processes (index, count): a sequential
    # dataset is dealt out among them, every count-th entry from index (set at each test's
    # start; None on a worker until its master's plan came)
    process_share: tuple[int, int] | None = ALONE
    # the recorder's live token counts (tokens/s per interval): each stream registers there
    live_streams: LiveStreams | None = None


@dataclass(eq=False)
class EnvironmentContext:
    """What tpot-locust keeps for one Locust Environment (a run has one per process)."""

    users: UserContext = field(default_factory=UserContext)
    recorded: bool = False  # the plugin records this Environment's users
    plugin_warned: bool = False  # the users said once that no plugin records them


# Our one field on Locust's Environment, set and read in ``context_of`` alone.
_FIELD = "tpot_context"


def context_of(environment: object) -> EnvironmentContext:
    """``environment``'s context (made on first use)."""
    context: EnvironmentContext | None = getattr(environment, _FIELD, None)
    if context is None:
        context = EnvironmentContext()
        setattr(environment, _FIELD, context)
    return context
