"""Where a request's figures are kept: under its user class, or, when the class split its
traffic over models (``classes.<name>.model``), under its class and model together, so
that the summary can show the same figures per class and per model from one recording.

Why one key rather than a second set of histograms: each sample is recorded once (at tens
of thousands of events/s a second copy would cost the loop that stamps tokens), and the
master merges workers' groups by key exactly as it merges classes.
"""

from __future__ import annotations

# Class names are identifiers (``scenario.schema``), so the first one splits a key.
SEPARATOR = "@"


def metric_group(user_class: str, model: str | None) -> str:
    """The key of a request's figures: ``class`` or ``class@model``."""
    return user_class if model is None else f"{user_class}{SEPARATOR}{model}"


def group_parts(group: str) -> tuple[str, str | None]:
    """A key's class and model (None: the class named no model)."""
    user_class, separator, model = group.partition(SEPARATOR)
    return user_class, (model if separator else None)
