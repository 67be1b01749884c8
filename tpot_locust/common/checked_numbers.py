"""Numbers read from text (command-line options; environment variables: ``environment``):
finite and in range, or an error naming them.

``float("nan")`` parses; a NaN threshold or limit silently disables a check or, as a
timer's interval, wedges the event loop; ``int("99999999999")`` workers is a MemoryError.
Every tuning variable and numeric option goes through here.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable


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
