"""Reading a scenario file: parse with positions, apply ``--set`` overrides, validate.

A file is parsed once per process (``_parsed``: keyed by its path and a hash of its
text), however many times a run asks for it with different overrides. Where one command
uses the file several times (``tpot-locust run``: with its options, then as saved in the
results), it reads it once (``ScenarioText``): what it derives from the file and the
``scenario.yaml`` it saves come from one read. (The Locust processes it starts read the file
again, from ``TPOT_SCENARIO``: a file edited during those seconds is not caught.)
"""

from __future__ import annotations

import copy
import hashlib
from pathlib import Path

from tpot_locust.scenario.model import Scenario
from tpot_locust.scenario.schema import validate
from tpot_locust.scenario.simulator_section import EngineCheck
from tpot_locust.scenario.yaml_source import (
    MAX_DEPTH,
    Located,
    ScenarioError,
    parse_located,
    read_source,
)

__all__ = ["ScenarioError", "ScenarioText", "load_scenario", "scenario_document"]


SETTINGS_SEPARATOR = "\n"  # between the overrides of one test's settings (--tpot-set)
# between the run's own overrides (--set) in TPOT_SET, the environment a supervised Locust
# gets: a unit separator, since one --set value may itself hold a line break
_ENV_SEPARATOR = "\x1f"
_CACHE_SIZE = 8
_parsed_files: dict[tuple[str, bytes], Located] = {}


def overrides_for_env(overrides: list[str]) -> str:
    """The run's ``--set`` overrides as ``TPOT_SET`` carries them to Locust's processes."""
    return _ENV_SEPARATOR.join(overrides)


def overrides_from_env(value: str | None) -> list[str]:
    """``TPOT_SET``'s overrides, as ``overrides_for_env`` joined them."""
    return [item for item in (value or "").split(_ENV_SEPARATOR) if item]


def split_settings(text: str | None) -> list[str]:
    """``--tpot-set``'s overrides (one ``KEY.PATH=VALUE`` per line)."""
    return [line.strip() for line in (text or "").split(SETTINGS_SEPARATOR) if line.strip()]


class ScenarioText:
    """One read of a scenario file (a ``ScenarioError`` naming it when it cannot be read),
    loaded as often as needed with different overrides."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._located = _parsed(path)

    def load(
        self,
        overrides: list[str] | None = None,
        labels: dict[str, str] | None = None,
        check_engine: EngineCheck | None = None,
    ) -> Scenario:
        """``labels``: the option each override came from (``--users -1``), named in its
        errors; other overrides are named as ``--set key=value``. ``check_engine``: the
        simulator's own check of ``simulator.profile``/``engine`` (the CLI passes it)."""
        return validate(self._with_overrides(overrides, labels), check_engine)

    def document(self, overrides: list[str] | None = None) -> object:
        """The scenario as data, with its overrides applied (what a run ran)."""
        return self._with_overrides(overrides, None).data

    def _with_overrides(
        self, overrides: list[str] | None, labels: dict[str, str] | None
    ) -> Located:
        return _overridden(_copy(self._located), overrides, labels)


def load_scenario(
    path: Path,
    overrides: list[str] | None = None,
    labels: dict[str, str] | None = None,
    check_engine: EngineCheck | None = None,
) -> Scenario:
    """The file as a validated scenario (``ScenarioText.load`` says what each argument is)."""
    return validate(_overridden(_parsed(path), overrides, labels), check_engine)


def scenario_document(path: Path, overrides: list[str] | None = None) -> object:
    """The scenario file as data, with its overrides applied (what a run ran)."""
    return _overridden(_parsed(path), overrides, None).data


def _overridden(
    located: Located, overrides: list[str] | None, labels: dict[str, str] | None
) -> Located:
    for override in overrides or []:
        label = (labels or {}).get(override, f"--set {override}")
        _apply_override(located, override, _short(label))  # each of its errors names it
    return located


def _parsed(path: Path) -> Located:
    """A fresh copy of the file's parse (validation and overrides change theirs); the
    (bounded) text is read each time, but parsed again only when it changed."""
    text = read_source(path)
    identity = (str(path), hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest())
    cached = _parsed_files.get(identity)
    if cached is None:
        cached = parse_located(text, str(path))
        if len(_parsed_files) >= _CACHE_SIZE:
            _parsed_files.pop(next(iter(_parsed_files)))
        _parsed_files[identity] = cached
    return _copy(cached)


def _copy(located: Located) -> Located:
    return Located(located.source, copy.deepcopy(located.data), dict(located.positions))


def _apply_override(located: Located, override: str, label: str) -> None:
    """``key.path=value``; the value is parsed as YAML (``--set classes.chat.users=4``),
    with the bounds of a scenario file (an alias bomb in a web form stops early)."""
    key, sep, raw = override.partition("=")
    if not sep or not key:
        raise ScenarioError("--set", 1, 1, _short(override), "expected key.path=value")
    parts = key.split(".")
    if len(parts) > MAX_DEPTH:
        raise ScenarioError("--set", 1, 1, _short(key), f"deeper than {MAX_DEPTH} levels")
    value = parse_located(raw, f"--set {_short(key)}").data if raw.strip() else None
    target = located.data
    if not isinstance(target, dict):
        raise located.error("", "the scenario must be a mapping")
    for part in parts[:-1]:
        target = target.setdefault(part, {})
        if not isinstance(target, dict):
            raise ScenarioError("--set", 1, 1, key, f"{part} is not a mapping")
    target[parts[-1]] = value
    located.overridden[key] = label


def _short(text: str, limit: int = 200) -> str:
    """A key or override as an error shows it (a form field may hold a megabyte)."""
    return text if len(text) <= limit else text[: limit - 3] + "..."
