"""Workers named as people say them: their host and an index (``vm#1``, ``vm#2``), not
Locust's client id (the host and 32 hex digits: ``vm_54b3b0e0a0cf455bb8525da11ee92103``).

Why: the report names workers where one of them is busy, lost or its own tail (issue 46,
item 4); an index a host, in the order they first reported, is what a reader can find
again (``summary["workers"]["ids"]`` keeps each name's client id, for Locust's own logs).
"""

from __future__ import annotations

import string
from collections import Counter

_UUID_DIGITS = 32


def host_of(client_id: str) -> str:
    """The host part of Locust's ``<hostname>_<uuid hex>`` client id (the whole id where
    it is not of that form)."""
    head, separator, tail = client_id.rpartition("_")
    if separator and head and len(tail) == _UUID_DIGITS and set(tail) <= set(string.hexdigits):
        return head
    return client_id


class WorkerNames:
    """The master's names of its workers: each client id's name, given once."""

    def __init__(self) -> None:
        self._names: dict[str, str] = {}
        self._per_host: Counter[str] = Counter()

    def __call__(self, client_id: str) -> str:
        name = self._names.get(client_id)
        if name is None:
            host = host_of(client_id)
            self._per_host[host] += 1
            name = self._names[client_id] = f"{host}#{self._per_host[host]}"
        return name

    def ids(self) -> dict[str, str]:
        """Each name's client id."""
        return {name: client_id for client_id, name in self._names.items()}
