"""The streaming APIs we speak: one module per API, each holding both of its sides.

A *dialect* (``dialect.Dialect``) owns everything one API decides: its path, its request
body, its framing (SSE with or without event names, NDJSON), which events carry tokens,
how a stream finishes or fails, and where its usage counts live; and, for the embedded
simulator, how a request of it is read and how its stream is written. The user classes,
the scenario schema's ``api`` values, the stream decoder and the simulator all take the
list from here, so adding an API is one new module, named in ``_MODULES``.
"""

from __future__ import annotations

from importlib import import_module

from tpot_locust.apis.dialect import Dialect

# name -> module (each defines ``DIALECT``), in the order the docs list them
_MODULES = {
    "chat": "openai_chat",
    "completions": "openai_completions",
    "responses": "openai_responses",
    "messages": "anthropic_messages",
    "tgi": "tgi",
    "sglang": "sglang",
    "ollama": "ollama",
}
API_NAMES = tuple(_MODULES)
_LOADED: dict[str, Dialect] = {}


def dialect_named(name: str) -> Dialect:
    """The dialect of API ``name`` (one of ``API_NAMES``); ``KeyError`` for another."""
    found = _LOADED.get(name)
    if found is None:
        module = import_module(f"tpot_locust.apis.{_MODULES[name]}")
        found = _LOADED[name] = module.DIALECT
    return found


def dialects() -> list[Dialect]:
    """Every dialect, in ``API_NAMES`` order."""
    return [dialect_named(name) for name in API_NAMES]
