"""What a web request may set: the Start form's fields and the user-class settings.

Locust's ``/swarm`` copies every form field that names one of its parsed options into
``parsed_options``, and ``/user`` sets any attribute of a user class. From a browser that
would let anyone who reaches the page choose where results are written (``tpot_out``),
how often timers fire (``tpot_report_interval``), or which local file a class reads and
sends (``dataset`` through ``tpot_set``). Only what a person running a test chooses passes
here: users, spawn rate, run time, host, the user-class picker, the options a locustfile
shows in the form itself, and a scenario's tunable settings, each checked as the scenario
loader checks it. Everything else is refused, with the reason, before Locust sees it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from tpot_locust.harness.load.scenario_in_use import ScenarioInUse
from tpot_locust.scenario.loader import split_settings
from tpot_locust.scenario.tunable import untunable
from tpot_locust.scenario.yaml_source import ScenarioError
from tpot_locust.wire.http_client import Origin

# Locust's own Start form; anything else must be an option the form shows (extra_options).
LOCUST_FIELDS = frozenset(
    {"user_count", "spawn_rate", "host", "run_time", "user_classes", "shape_class", "profile"}
)
SETTINGS_FIELD = "tpot_set"
MAX_USERS = 1_000_000
MAX_SPAWN_RATE = 100_000.0
MAX_RUN_TIME_S = 30 * 24 * 3600
# /user (Locust's user-class settings): how many and how often, never what they read.
USER_CLASS_FIELDS = frozenset({"user_class_name", "fixed_count", "weight", "host", "tasks"})
MAX_USER_BODY = 64 * 1024


def swarm_refusal(
    form: Mapping[str, str],
    parsed: Mapping[str, Any],
    shown: set[str],
    in_use: ScenarioInUse | None = None,
) -> str | None:
    """Why this Start form is refused (None: Locust may run it). ``parsed``: Locust's parsed
    options; ``shown``: the options the page itself shows as custom parameters; ``in_use``:
    the scenario a test's settings would change (None: a plain locustfile)."""
    for name in form:
        if name in LOCUST_FIELDS or name in shown or name == SETTINGS_FIELD:
            continue
        if name in parsed:
            return (
                f"the web form cannot set {name!r}: it is chosen where Locust is started "
                "(its command line or environment)"
            )
    checks = (
        ("user_count", _users),
        ("spawn_rate", _spawn_rate),
        ("run_time", _run_time),
        ("host", _host),
        (SETTINGS_FIELD, lambda value: _settings(value, in_use)),
    )
    for name, check in checks:
        value = form.get(name)
        if value is not None and (why := check(value)):
            return f"{name}: {why}"
    return None


def _users(value: str) -> str | None:
    try:
        users = int(value)
    except ValueError:
        return f"{value[:40]!r} is not a whole number"
    return None if 0 <= users <= MAX_USERS else f"must be between 0 and {MAX_USERS:,}"


def _spawn_rate(value: str) -> str | None:
    try:
        rate = float(value)
    except ValueError:
        return f"{value[:40]!r} is not a number"
    if not math.isfinite(rate) or not 0 < rate <= MAX_SPAWN_RATE:
        return f"must be a number > 0 and <= {MAX_SPAWN_RATE:g}"
    return None


def _run_time(value: str) -> str | None:
    if not value:
        return None
    from locust.util.timespan import parse_timespan

    try:
        seconds = parse_timespan(value)
    except (ValueError, OverflowError):
        return f"{value[:40]!r}: use 20, 20s, 3m, 2h or 1h20m"
    return None if 0 < seconds <= MAX_RUN_TIME_S else "must be > 0 and at most 30 days"


def _host(value: str) -> str | None:
    if not value:
        return None
    try:
        Origin.parse(value)
    except ValueError as error:
        return str(error)
    return None


def _settings(value: str, in_use: ScenarioInUse | None) -> str | None:
    """A sweep step's settings: tunable keys, plain values, and a scenario that loads."""
    settings = split_settings(value)
    if not settings:
        return None
    if why := untunable(settings):
        return why
    if in_use is None:
        return "test settings need the scenario locustfile (TPOT_SCENARIO)"
    try:
        in_use.with_settings(settings)
    except (ScenarioError, ValueError) as error:
        return str(error)
    return None


def user_settings_refusal(body: bytes, classes: Mapping[str, Any]) -> str | None:
    """Why a ``/user`` request (one user class's settings) is refused (None: it may pass)."""
    if len(body) > MAX_USER_BODY:
        return f"user settings over {MAX_USER_BODY // 1024} KiB"
    try:
        settings = json.loads(body)
    except (ValueError, RecursionError):
        return "user settings must be a JSON object"
    if not isinstance(settings, dict):
        return "user settings must be a JSON object"
    if settings.get("user_class_name") not in classes:
        return "user_class_name must name one of this run's user classes"
    for name, value in settings.items():
        if name not in USER_CLASS_FIELDS:
            return f"a user class's {str(name)[:40]!r} cannot be set from the web UI"
        if name in ("fixed_count", "weight") and not _whole(value, 0, MAX_USERS):
            return f"{name} must be a whole number between 0 and {MAX_USERS:,}"
        if name == "host" and (not isinstance(value, str) or _host(value)):
            return "host must be an http:// or https:// URL"
        if name == "tasks" and not (
            isinstance(value, list) and all(isinstance(task, str) for task in value)
        ):
            return "tasks must be a list of task names"
    return None


def _whole(value: Any, low: int, high: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high
