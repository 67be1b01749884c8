"""The settings one test of a running session may change (``--tpot-set``, the web form's
``tpot_set``, a cluster sweep's step): how much load and for how long, never what is read,
where results go or what is sent (a file path, a header, a server's body).

The values must be plain numbers or durations; the scenario loader then checks each as it
checks a file's. Keys under ``sweep.`` steer the sweeping client only and never travel.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

TUNABLE_SETTINGS = (
    "duration",
    "warmup",
    "cooldown",
    "spawn_rate",
    "classes.*.users",
    "classes.*.rate",
    "classes.*.speedup",
    "classes.*.think_time",
    "classes.*.turns",
    "classes.*.prompt_tokens",
    "classes.*.output_tokens",
    "classes.*.burstiness",
    "classes.*.max_in_flight",
)
CLIENT_ONLY_PREFIX = "sweep."  # a sweep's own keys: the sweeping client reads them
_SCALAR = re.compile(r"[0-9][0-9A-Za-z_.+-]{0,31}")  # 12, 0.5, 1e3, 90s, 1h30m
MAX_SETTINGS = 32


def untunable(settings: Iterable[str]) -> str | None:
    """Why ``settings`` are not all tunable ones with plain values (None: they are)."""
    settings = list(settings)
    if len(settings) > MAX_SETTINGS:
        return f"at most {MAX_SETTINGS} settings per test, got {len(settings)}"
    for setting in settings:
        key, sep, value = setting.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not any(_matches(key, pattern) for pattern in TUNABLE_SETTINGS):
            allowed = ", ".join(TUNABLE_SETTINGS)
            return f"{key[:80]!r} cannot be set for one test (only {allowed})"
        if not _SCALAR.fullmatch(value):
            return f"{key}: {value[:40]!r} is not a plain number or duration"
    return None


def _matches(key: str, pattern: str) -> bool:
    parts, wanted = key.split("."), pattern.split(".")
    return len(parts) == len(wanted) and all(
        w in ("*", p) for p, w in zip(parts, wanted, strict=True)
    )
