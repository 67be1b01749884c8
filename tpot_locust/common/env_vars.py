"""Every environment variable the package reads, declared once, and the only reads of them.

Why one room: the variables were spelt in ten modules, each reading ``os.environ`` its own
way; a reader now finds here all the environment can change (``docs/environment.md`` says
the same for people; ``tests/unit/test_env_vars.py`` holds that no other module reads a
``TPOT_`` variable, and that the doc lists every one declared here). A module names its
variable by the constant below and reads it with ``text``, ``number`` or ``count``; numbers
are finite and in range or an error naming the variable.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass


@dataclass(frozen=True)
class Variable:
    """One variable: its name, who reads it, and whether people set it (else our own
    processes set it for each other)."""

    name: str
    read_by: str
    for_users: bool = True


# For users (docs/environment.md, "For users")
SCENARIO = "TPOT_SCENARIO"
OUT = "TPOT_OUT"
REPORT_INTERVAL = "TPOT_REPORT_INTERVAL"
SCENARIO_NAME = "TPOT_SCENARIO_NAME"
SLO = "TPOT_SLO"
METRICS_ADDRESS = "TPOT_METRICS_ADDRESS"
WEB_ALLOWED_HOSTS = "TPOT_WEB_ALLOWED_HOSTS"
MAX_CLIENT_ERRORS = "TPOT_MAX_CLIENT_ERRORS"
STALL_THRESHOLD_MS = "TPOT_STALL_THRESHOLD_MS"
STALL_TRACE = "TPOT_STALL_TRACE"
STAMPS = "TPOT_LOCUST_STAMPS"
READ_BATCH_MS = "TPOT_LOCUST_READ_BATCH_MS"
SEGMENT_RING = "TPOT_SEGMENT_RING"
# Between our own processes (set by us, never by hand)
OVERRIDES = "TPOT_SET"
SUPERVISED = "TPOT_SUPERVISED"
METRICS_URL = "TPOT_METRICS_URL"

VARIABLES = (
    Variable(SCENARIO, "the scenario locustfile"),
    Variable(OUT, "the Locust plugin"),
    Variable(REPORT_INTERVAL, "the Locust plugin"),
    Variable(SCENARIO_NAME, "the Locust plugin"),
    Variable(SLO, "the Locust plugin"),
    Variable(METRICS_ADDRESS, "the Locust plugin"),
    Variable(WEB_ALLOWED_HOSTS, "the web UI guard"),
    Variable(MAX_CLIENT_ERRORS, "each user"),
    Variable(STALL_THRESHOLD_MS, "the loop probe"),
    Variable(STALL_TRACE, "the loop probe"),
    Variable(STAMPS, "the wire"),
    Variable(READ_BATCH_MS, "the wire"),
    Variable(SEGMENT_RING, "the wire's segment tap"),
    Variable(OVERRIDES, "every Locust process of tpot-locust run", for_users=False),
    Variable(SUPERVISED, "tpot-locust run's Locust master", for_users=False),
    Variable(METRICS_URL, "the server-metrics sampler's child", for_users=False),
)
_NAMES = frozenset(variable.name for variable in VARIABLES)


def _declared(name: str) -> str:
    if name not in _NAMES:
        raise KeyError(f"{name}: not a variable of common/environment.py")
    return name


def text(name: str, default: str = "") -> str:
    """``$name`` as given (``default`` when unset)."""
    return os.environ.get(_declared(name), default)


def named_by_user(name: str) -> str | None:
    """A variable the scenario names (``server.api_key_env``): the user chose it, so it is
    not declared here; read as given (None when unset)."""
    return os.environ.get(name)


def is_set(name: str) -> bool:
    """``$name`` is set to something (not empty)."""
    return bool(text(name))


def number(name: str, default: float, minimum: float, maximum: float) -> float:
    """``$name`` as a number in [minimum, maximum]; ``default`` when unset or empty."""
    given = text(name).strip()
    if not given:
        return default
    try:
        value = float(given)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and minimum <= value <= maximum):
        raise ValueError(f"{name}={given[:40]!r}: must be a number from {minimum:g} to {maximum:g}")
    return value


def count(name: str, default: int, minimum: int, maximum: int) -> int:
    """``$name`` as a whole number in [minimum, maximum]; ``default`` when unset or empty."""
    value = number(name, default, minimum, maximum)
    if value != int(value):
        raise ValueError(f"{name}={value:g}: must be a whole number")
    return int(value)
