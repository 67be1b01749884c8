"""Checks of JSON values read back (``report.saved_results``): each takes (value, key) and
returns the value, or raises ``Problem`` naming the key; ``shaped`` derives one from a type
of the summary's typed shape (``report.summary_types``, ``common.run_facts``), so a key
added there is checked here with no second list to keep.
"""

from __future__ import annotations

import dataclasses
import math
import typing
from collections.abc import Callable, Mapping
from types import UnionType
from typing import Annotated, Any, Literal, Union

from tpot_locust.common.bounds import Bounds, ByHand

MAX_INT = 2**63 - 1
MAX_NUMBER = 1e18  # no duration, rate or count of a run comes near it
MAX_ITEMS = 1_000_000
MAX_TEXT = 100_000


class Problem(Exception):
    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key, self.message = key, message


class Unusable:
    """A JSON number kept aside at parsing: NaN, Infinity or an integer of many digits."""

    def __init__(self, text: str) -> None:
        self.text = text if len(text) <= 24 else f"an integer of {len(text):,} digits"


Check = Callable[[object, str], object]


def _kind(value: object) -> str:
    if isinstance(value, Unusable):
        return value.text
    return {
        dict: "an object",
        list: "a list",
        str: "a string",
        bool: "true/false",
        type(None): "null",
    }.get(type(value), type(value).__name__)


def integer(low: int = 0, high: int = MAX_INT) -> Check:
    def check(value: object, key: str) -> object:
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if not isinstance(value, int) or isinstance(value, bool):
            raise Problem(key, f"expected an integer, found {_kind(value)}")
        if not low <= value <= high:
            raise Problem(key, f"{_shown(value)} is out of range ({low} .. {high})")
        return value

    return check


def _shown(value: int | float) -> str:
    """A number for a message: a huge one by its size, never its 300 digits."""
    if isinstance(value, int) and abs(value) >= 10**20:
        return f"an integer of {len(str(abs(value)))} digits ({float(value):.3g})"
    return f"{value:.6g}" if isinstance(value, float) else str(value)


def number(low: float = -MAX_NUMBER, high: float = MAX_NUMBER) -> Check:
    def check(value: object, key: str) -> object:
        if not isinstance(value, int | float) or isinstance(value, bool):
            raise Problem(key, f"expected a finite number, found {_kind(value)}")
        if not math.isfinite(value) or not low <= value <= high:
            raise Problem(key, f"{_shown(value)} is out of range ({low:g} .. {high:g})")
        return value

    return check


def text(max_length: int = MAX_TEXT) -> Check:
    def check(value: object, key: str) -> object:
        if not isinstance(value, str):
            raise Problem(key, f"expected a string, found {_kind(value)}")
        if len(value) > max_length:
            raise Problem(key, f"a string of {len(value):,} characters (at most {max_length:,})")
        return value

    return check


def boolean() -> Check:
    def check(value: object, key: str) -> object:
        if not isinstance(value, bool):
            raise Problem(key, f"expected true or false, found {_kind(value)}")
        return value

    return check


def one_of(*choices: str) -> Check:
    def check(value: object, key: str) -> object:
        if value not in choices or not isinstance(value, str):
            raise Problem(key, f"expected one of {', '.join(choices)}, found {_kind(value)}")
        return value

    return check


def optional(inner: Check) -> Check:
    def check(value: object, key: str) -> object:
        return None if value is None else inner(value, key)

    return check


def list_of(inner: Check, max_items: int = MAX_ITEMS) -> Check:
    def check(value: object, key: str) -> object:
        if not isinstance(value, list):
            raise Problem(key, f"expected a list, found {_kind(value)}")
        if len(value) > max_items:
            raise Problem(key, f"{len(value):,} items (at most {max_items:,})")
        return [inner(item, f"{key}[{index}]") for index, item in enumerate(value)]

    return check


def mapping(inner: Check, max_items: int = MAX_ITEMS) -> Check:
    """An object with names of its own (classes, histograms, error categories)."""

    def check(value: object, key: str) -> object:
        if not isinstance(value, dict):
            raise Problem(key, f"expected an object, found {_kind(value)}")
        if len(value) > max_items:
            raise Problem(key, f"{len(value):,} entries (at most {max_items:,})")
        return {name: inner(item, _join(key, name)) for name, item in value.items()}

    return check


def record(known: dict[str, Check], required: tuple[str, ...] = ()) -> Check:
    """An object of known keys: each one present is checked, the required ones must be;
    others pass as they are (a newer version's additions)."""

    def check(value: object, key: str) -> object:
        if not isinstance(value, dict):
            raise Problem(key, f"expected an object, found {_kind(value)}")
        for name in required:
            if name not in value:
                raise Problem(_join(key, name), "missing")
        checked = dict(value)
        for name, inner in known.items():
            if name in value:
                checked[name] = inner(value[name], _join(key, name))
        return checked

    return check


def _join(key: str, name: str) -> str:
    return f"{key}.{name}" if key else str(name)


def scrubbed(value: object) -> object:
    """Numbers kept aside in keys no shape names (a newer version's): null, so that what
    was read can be written again as JSON."""
    if isinstance(value, Unusable):
        return None
    if isinstance(value, dict):
        return {key: scrubbed(item) for key, item in value.items()}
    if isinstance(value, list):
        return [scrubbed(item) for item in value]
    return value


def anything() -> Check:
    """A value of any type (a part typed ``Any``: what reads it checks it)."""

    def check(value: object, key: str) -> object:
        return value

    return check


def shaped(kind: Any, by_hand: Mapping[str, Check], bounds: Bounds | None = None) -> Check:
    """The check of a value of type ``kind``, derived from it: a TypedDict's keys (its
    required ones must be there), ``X | None``, ``list``, ``dict``, ``Literal``, the scalars
    (``Bounds`` from ``Annotated``), a dataclass with ``from_json`` (its fields, then
    converted); a ``ByHand`` part by its check in ``by_hand``."""
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin is Annotated:
        marks = args[1:]
        named = [mark.name for mark in marks if isinstance(mark, ByHand)]
        if named:
            return by_hand[named[0]]
        given = [mark for mark in marks if isinstance(mark, Bounds)]
        return shaped(args[0], by_hand, given[0] if given else bounds)
    bounds = bounds or Bounds()
    if origin in (Union, UnionType):
        inner = [arg for arg in args if arg is not type(None)]
        if len(inner) != 1:
            raise TypeError(f"no check for {kind}: a union of {len(inner)} types")
        check = shaped(inner[0], by_hand, bounds)
        return optional(check) if len(inner) < len(args) else check
    if kind is Any:
        return anything()
    if origin is Literal:
        return one_of(*args)
    if kind is bool:
        return boolean()
    if kind is int:
        return integer(int(_or(bounds.low, 0)), int(_or(bounds.high, MAX_INT)))
    if kind is float:
        return number(_or(bounds.low, -MAX_NUMBER), _or(bounds.high, MAX_NUMBER))
    if kind is str:
        return text(bounds.items or MAX_TEXT)
    if origin is list:
        return list_of(shaped(args[0], by_hand), bounds.items or MAX_ITEMS)
    if origin is dict:
        return mapping(shaped(args[1], by_hand), bounds.items or MAX_ITEMS)
    if typing.is_typeddict(kind):
        return _typed_record(kind, by_hand)
    if dataclasses.is_dataclass(kind) and hasattr(kind, "from_json"):
        return _facts_record(kind, by_hand)
    raise TypeError(f"no check for {kind}")


def _or(value: float | None, otherwise: float) -> float:
    return otherwise if value is None else value


_BUILT: dict[tuple[object, int], Check] = {}  # by type (and by_hand): a shape names itself


def _typed_record(kind: Any, by_hand: Mapping[str, Check]) -> Check:
    if (kind, id(by_hand)) in _BUILT:
        return _BUILT[kind, id(by_hand)]
    inner: list[Check] = []
    _BUILT[kind, id(by_hand)] = lambda value, key: inner[0](value, key)  # while it is built
    hints = typing.get_type_hints(kind, include_extras=True)
    known = {name: shaped(hint, by_hand) for name, hint in hints.items()}
    required = tuple(name for name in hints if name in kind.__required_keys__)
    inner.append(record(known, required))
    return inner[0]


def _facts_record(kind: Any, by_hand: Mapping[str, Check]) -> Check:
    """A dataclass read from JSON: its fields' checks, then ``kind.from_json``."""
    hints = typing.get_type_hints(kind, include_extras=True)
    fields = [field.name for field in dataclasses.fields(kind) if field.metadata.get("json", 1)]
    checks = record({name: shaped(hints[name], by_hand) for name in fields})

    def check(value: object, key: str) -> object:
        return kind.from_json(scrubbed(checks(value, key)))

    return check
