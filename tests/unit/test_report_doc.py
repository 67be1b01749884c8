"""docs/report.md's key list of ``summary.json`` against its one typed shape
(``report.summary_types.Summary``): a key added, renamed or dropped in either fails here."""

from __future__ import annotations

import re
import typing
from dataclasses import is_dataclass
from pathlib import Path
from typing import Any

from tpot_locust.common.run_facts import FACT_NAMES
from tpot_locust.report.summary_types import Summary

DOC = Path(__file__).resolve().parents[2] / "docs" / "report.md"

# An object of the list: its keys (each with its own object, if the list gives one), and
# whether it ends in "..." (it names some keys, not all).
Listed = tuple[dict[str, "Listed | None"], bool]


def _key_list() -> str:
    text = DOC.read_text()
    start = text.index("`summary.json` holds the same figures:")
    start = text.index("`{", start) + 1
    return text[start : text.index("}`", start) + 1]


def _parse(text: str, at: int) -> tuple[Listed, int]:
    """The object opening at ``text[at]`` (``{``) and where it ends; text in parentheses
    and between ``[`` and ``]`` (a list's item) is prose or items, not keys."""
    keys: dict[str, Listed | None] = {}
    ellipsis, last, at = False, None, at + 1
    while text[at] != "}":
        char = text[at]
        if char == '"':
            end = text.index('"', at + 1)
            word = text[at + 1 : end]
            at = end + 1
            if word.startswith("<") or "|" in text[at : at + 1]:
                last = None  # a name of its own ("<user class>", "segment"|"kernel")
                continue
            keys[word], last = None, word
            continue
        if char == "{":
            inner, at = _parse(text, at)
            if last is not None:
                keys[last] = inner
            continue
        if char in "([":
            depth, closing = 1, {"(": ")", "[": "]"}[char]
            at += 1
            while depth:
                depth += {char: 1, closing: -1}.get(text[at], 0)
                at += 1
            continue
        if text.startswith("...", at):
            ellipsis = True
        at += 1
    return (keys, ellipsis), at + 1


def _typed_keys(kind: Any) -> dict[str, Any] | None:
    """A TypedDict's keys and their types; the run's facts' names; None for anything else."""
    kind = typing.get_origin(kind) or kind
    if is_dataclass(kind):
        return dict.fromkeys(FACT_NAMES)
    if isinstance(kind, type) and issubclass(kind, dict) and hasattr(kind, "__total__"):
        return typing.get_type_hints(kind)
    return None


def _typed(kind: Any) -> Any:
    """``X | None`` as ``X``."""
    args = [arg for arg in typing.get_args(kind) if arg is not type(None)]
    return args[0] if typing.get_origin(kind) in (typing.Union, type(None) | int) else kind


def _differences(listed: Listed, kind: Any, where: str) -> list[str]:
    keys, ellipsis = listed
    typed = _typed_keys(_typed(kind))
    if typed is None:
        return []  # an object of names of its own (metrics, classes)
    problems = [f"{where}{key}: listed, not in the shape" for key in keys if key not in typed]
    if not ellipsis:
        problems += [f"{where}{key}: in the shape, not listed" for key in typed if key not in keys]
    for key, inner in keys.items():
        if inner is not None and key in typed and typed[key] is not None:
            problems += _differences(inner, typed[key], f"{where}{key}.")
    return problems


def test_the_key_list_parses() -> None:
    (keys, _), _ = _parse(_key_list(), 0)
    assert {"metrics", "client", "requests", "run", "classes"} <= set(keys)
    assert re.fullmatch(r"[a-z_0-9.]+", "".join(keys)) is not None


def test_report_md_lists_the_summarys_keys_as_typed() -> None:
    listed, _ = _parse(_key_list(), 0)
    assert _differences(listed, Summary, "") == []
