"""Numbers read from environment variables: finite and in range, or an error naming them.

``float("nan")`` parses; a NaN threshold or limit silently disables a check or, as a
timer's interval, wedges the event loop. Every tuning variable goes through here.
"""

from __future__ import annotations

import math
import os


def env_number(name: str, default: float, minimum: float, maximum: float) -> float:
    """``$name`` as a number in [minimum, maximum]; ``default`` when unset or empty."""
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and minimum <= value <= maximum):
        raise ValueError(f"{name}={text[:40]!r}: must be a number from {minimum:g} to {maximum:g}")
    return value


def env_count(name: str, default: int, minimum: int, maximum: int) -> int:
    """``$name`` as a whole number in [minimum, maximum]; ``default`` when unset or empty."""
    value = env_number(name, default, minimum, maximum)
    if value != int(value):
        raise ValueError(f"{name}={value:g}: must be a whole number")
    return int(value)
