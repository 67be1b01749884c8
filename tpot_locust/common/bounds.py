"""Bounds a saved value must keep, written beside its type in the summary's typed shape
(``Annotated[int, Bounds(0, 255)]``) and checked when a saved file is read back
(``report.json_checks.shaped``): the type says what a value is, its bound how much of it a
file may hold. Types are transparent to mypy and to every reader.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated


@dataclass(frozen=True)
class Bounds:
    """A number's range; a text's most characters, a list's items, an object's entries."""

    low: float | None = None
    high: float | None = None
    items: int | None = None


@dataclass(frozen=True)
class ByHand:
    """A part whose keys are chosen at run time (a metric's, a class's): its check is
    written by hand, under this name (``report.saved_results``)."""

    name: str


NonNegative = Annotated[float, Bounds(low=0.0)]
Share = Annotated[float, Bounds(0.0, 1.0)]
ShortText = Annotated[str, Bounds(items=100)]
Name = Annotated[str, Bounds(items=1000)]  # a worker's, a request's
