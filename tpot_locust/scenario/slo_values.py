"""The values an ``slo`` block is written in: times (``15ms``, ``1.5s``) and fractions
(``0.1%``), read and shown back.

Why its own room: the gate's verdicts, ``tpot-locust compare``'s thresholds and the
``slo`` block itself read and print the same values, so each way of writing one is defined
once, here, with its bounds (every number finite and in range).
"""

from __future__ import annotations

import math
import re

MAX_TIME_MS = 30 * 24 * 3600 * 1000.0  # an SLO's time limit: 30 days, as any duration
_TIME = re.compile(r"^\s*(\d+(?:\.\d+)?|\.\d+)\s*(us|ms|s|m)?\s*$")
_TIME_UNITS_MS = {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60_000.0, None: 1.0}
_PERCENT = re.compile(r"^\s*(\d+(?:\.\d+)?|\.\d+)\s*%\s*$")


def format_value(value: float, unit: str, fraction_digits: str = ".4g") -> str:
    """A measured figure or a limit as the verdicts show it: ``2.5 ms``, ``0.1%``, ``500``."""
    if unit == "ms":
        return f"{value:g} ms"
    if unit == "fraction":
        return f"{value * 100:{fraction_digits}}%"
    return f"{value:g}"


def parse_time_ms(value: object) -> float:
    """``15ms``, ``1.5s``, ``800 us`` or a bare number of milliseconds."""
    if isinstance(value, bool):
        raise ValueError("must be a time like 15ms or 1.5s")
    if isinstance(value, (int, float)):
        if abs(value) > MAX_TIME_MS:  # before float(): a 400-digit integer overflows it
            raise ValueError(f"must be <= {MAX_TIME_MS:.0f} ms (30 days)")
        milliseconds = float(value)
    else:
        match = _TIME.match(str(value)) if len(str(value)) <= 64 else None
        if not match:
            raise ValueError(f"must be a time like 15ms or 1.5s, got {str(value)[:64]!r}")
        milliseconds = float(match.group(1)) * _TIME_UNITS_MS[match.group(2)]
    if math.isnan(milliseconds) or milliseconds <= 0:
        raise ValueError("must be > 0")
    if milliseconds > MAX_TIME_MS:
        raise ValueError(f"must be <= {MAX_TIME_MS:.0f} ms (30 days)")
    return milliseconds


def parse_fraction(value: object) -> float:
    """``0.1%`` or a fraction ``0.001`` (0 .. 1)."""
    if isinstance(value, bool):
        raise ValueError("must be a percentage like 0.1% or a fraction like 0.001")
    if isinstance(value, (int, float)):
        if not -1 <= value <= 1:  # before float(): a 400-digit integer overflows it
            raise ValueError("must be between 0 and 100%")
        fraction = float(value)
    else:
        match = _PERCENT.match(str(value)) if len(str(value)) <= 64 else None
        if not match:
            raise ValueError(
                f"must be a percentage like 0.1% or a fraction, got {str(value)[:64]!r}"
            )
        fraction = float(match.group(1)) / 100
    if not 0 <= fraction <= 1:
        raise ValueError("must be between 0 and 100%")
    return fraction
