"""One field of the ``slo`` block read and checked: a list of names, a parsed value, a
positive number, a count; each bad one an error located at its key (``slo``'s parsers).

Why its own room: the block's parsers (``slo``) share these; kept apart they stay short.
"""

from __future__ import annotations

from collections.abc import Callable

from tpot_locust.scenario.yaml_source import Located

MAX_SLO_NUMBER = 1e12  # a throughput or an interference factor
MAX_SLO_COUNT = 1_000_000_000  # a count of samples


def field_names(
    located: Located, path: str, value: object, allowed: tuple[str, ...] | None
) -> list[str]:
    if value is None:
        return []
    items = value if isinstance(value, list) else str(value).split(",")
    names = [str(item).strip() for item in items]
    for name in names:
        if allowed is not None and name not in allowed:
            raise located.error(path, f"{name}: use {', '.join(allowed)}")
    return names


def parsed(located: Located, path: str, value: object, parse: Callable[[object], float]) -> float:
    try:
        return parse(value)
    except ValueError as error:
        raise located.error(path, str(error)) from None


def positive(located: Located, path: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise located.error(path, "must be a number > 0")
    if value > MAX_SLO_NUMBER:  # also infinity
        raise located.error(path, f"must be <= {MAX_SLO_NUMBER:.0e}")
    return float(value)


def count(located: Located, path: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise located.error(path, "must be an integer >= 0")
    if value > MAX_SLO_COUNT:
        raise located.error(path, f"must be <= {MAX_SLO_COUNT:,}")
    return value
