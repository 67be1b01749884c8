"""Numbers read from text (environment variables, command-line options): finite and in
range, or an error naming them.

``float("nan")`` parses; a NaN threshold or limit silently disables a check or, as a
timer's interval, wedges the event loop; ``int("99999999999")`` workers is a MemoryError.
Every tuning variable and numeric option goes through here.
"""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Callable


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


def option_number(minimum: float, maximum: float, *, whole: bool = False) -> Callable[[str], float]:
    """An ``argparse`` type: a finite number (``whole``: an integer) in [minimum, maximum];
    anything else is the option's usage error (exit 2), before anything starts."""

    def parse(text: str) -> float:
        try:
            value = int(text) if whole else float(text)
        except ValueError:
            value = math.nan
        if not (math.isfinite(value) and minimum <= value <= maximum):
            kind = "a whole number" if whole else "a number"
            raise argparse.ArgumentTypeError(
                f"{text[:40]!r}: must be {kind} from {minimum:g} to {maximum:g}"
            )
        return value

    return parse
