"""Reading a scenario file: parse with positions, apply ``--set`` overrides, validate."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tpot_locust.scenario.model import Scenario
from tpot_locust.scenario.schema import EngineCheck, validate
from tpot_locust.scenario.yaml_source import Located, ScenarioError, load_located, parse_located

__all__ = ["ScenarioError", "load_scenario", "scenario_document"]


SETTINGS_SEPARATOR = "\n"  # between the overrides of one test's settings (--tpot-set)


def split_settings(text: str | None) -> list[str]:
    """``--tpot-set``'s overrides (one ``KEY.PATH=VALUE`` per line)."""
    return [line.strip() for line in (text or "").split(SETTINGS_SEPARATOR) if line.strip()]


def load_scenario(
    path: Path, overrides: list[str] | None = None, labels: dict[str, str] | None = None,
    check_engine: EngineCheck | None = None,
) -> Scenario:  # fmt: skip
    """``labels``: the option each override came from (``--users -1``), named in its
    errors; other overrides are named as ``--set key=value``. ``check_engine``: the
    simulator's own check of ``simulator.profile``/``engine`` (the CLI passes it)."""
    located = load_located(path)
    for override in overrides or []:
        label = (labels or {}).get(override, f"--set {override}")
        _apply_override(located, override, label)
    return validate(located, check_engine)


def scenario_document(path: Path, overrides: list[str] | None = None) -> Any:
    """The scenario file as data, with its overrides applied (what a run ran)."""
    located = load_located(path)
    for override in overrides or []:
        _apply_override(located, override, f"--set {override}")
    return located.data


def _apply_override(located: Located, override: str, label: str) -> None:
    """``key.path=value``; the value is parsed as YAML (``--set classes.chat.users=4``)."""
    key, sep, raw = override.partition("=")
    if not sep or not key:
        raise ScenarioError("--set", 1, 1, override, "expected key.path=value")
    value = parse_located(raw, f"--set {key}").data if raw.strip() else None
    target = located.data
    if not isinstance(target, dict):
        raise located.error("", "the scenario must be a mapping")
    parts = key.split(".")
    for part in parts[:-1]:
        target = target.setdefault(part, {})
        if not isinstance(target, dict):
            raise ScenarioError("--set", 1, 1, key, f"{part} is not a mapping")
    target[parts[-1]] = value
    located.overridden[key] = label
