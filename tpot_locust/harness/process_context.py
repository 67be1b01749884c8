"""What tpot-locust keeps for this process: one typed context, made once, passed where needed.

Locust calls our listeners and builds our users with its ``Environment`` alone, and the
scenario locustfile names its scenario at import, before Locust has made any Environment.
So the process's context has one module-level home, ``PROCESS``; each Environment's part
of it (what the run hands its users, the run itself) is reached through ``context_of``,
the one place that reads or sets our field on Locust's Environment (which declares none).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tpot_locust.wire.streaming import LiveStreams

if TYPE_CHECKING:  # types only: both modules read this one (pyproject.toml's lint-imports)
    from tpot_locust.harness.run_state import RunState
    from tpot_locust.harness.scenario_in_use import ScenarioInUse

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
    run: RunState | None = None  # the plugin's, made at Locust's init (None: no plugin)
    plugin_warned: bool = False  # the users said once that no plugin records them


@dataclass(eq=False)
class ProcessContext:
    """This process's context: the scenario it runs and every Environment's run."""

    # the scenario locustfile's scenario (None: a plain locustfile)
    scenario: ScenarioInUse | None = None  # set by ``scenario_in_use.use_scenario``
    # every Environment's run: Locust's reset_stats event carries no environment
    runs: list[RunState] = field(default_factory=list)


PROCESS = ProcessContext()

# Our one field on Locust's Environment, set and read in ``context_of`` alone.
_FIELD = "tpot_context"


def context_of(environment: object) -> EnvironmentContext:
    """``environment``'s context (made on first use)."""
    context: EnvironmentContext | None = getattr(environment, _FIELD, None)
    if context is None:
        context = EnvironmentContext()
        setattr(environment, _FIELD, context)
    return context


def scenario_in_use() -> ScenarioInUse | None:
    """The scenario this process runs (None: a plain locustfile)."""
    return PROCESS.scenario
