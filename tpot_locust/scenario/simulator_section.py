"""The ``simulator:`` section's checks that join it to the rest of the scenario: an engine
profile and its overrides (the profile itself is the simulator's to check, through the
CLI's ``EngineCheck``), and reasoning only over an API that can carry it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from tpot_locust.apis import API_NAMES, dialect_named
from tpot_locust.scenario.model import Server, Simulator
from tpot_locust.scenario.yaml_source import Located

# The simulator's own check of a profile and its overrides (``sim.profiles``, from the CLI)
EngineCheck = Callable[[str, dict[str, object]], None]


def validate_reasoning(located: Located, simulator: Simulator, server: Server) -> None:
    """The simulator's reasoning needs an API that can carry it (a scenario naming its
    server does not start the simulator)."""
    if simulator.reasoning_tokens in (None, 0) or server.host is not None:
        return
    dialect = dialect_named(server.api)
    if not dialect.sim_reasoning:
        carriers = ", ".join(name for name in API_NAMES if dialect_named(name).sim_reasoning)
        raise located.error(
            "simulator.reasoning_tokens",
            f"the {server.api} API ({dialect.path}) has no reasoning form; the simulator "
            f"streams reasoning in {carriers} (or set 0)",
        )


def validate_engine(
    located: Located,
    simulator: Simulator,
    given: dict[str, object],
    check_engine: EngineCheck | None,
) -> None:
    """``profile`` (a shipped name or a YAML file) and ``engine`` overrides of its keys;
    the profile itself is the simulator's to check (``check_engine``, from the CLI)."""
    if simulator.profile is None:
        if "engine" in given:
            raise located.error("simulator.engine", "needs simulator.profile")
        return
    for key in ("ttft_ms", "gap_ms"):
        if key in given:
            raise located.error(f"simulator.{key}", "not with a profile (the engine times steps)")
    if check_engine is None:
        return
    try:
        check_engine(
            resolve_profile(simulator.profile, Path(located.source).parent), dict(simulator.engine)
        )
    except ValueError as error:
        raise located.error(
            "simulator.engine" if simulator.engine else "simulator.profile", str(error)
        ) from None


def resolve_profile(profile: object, base_dir: Path) -> str:
    """A shipped profile name as is; a file path relative to the scenario's folder."""
    text = str(profile)
    if text.endswith((".yaml", ".yml")) and not Path(text).is_absolute():
        return str(base_dir / text)
    return text
