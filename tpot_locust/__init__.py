"""tpot-locust: per-token latency (TPOT) load testing for LLM inference servers.

The user classes are imported lazily: importing Locust monkey-patches the process with
gevent, which the simulator (asyncio) and the CLI's supervisor must not get.
"""

from __future__ import annotations

from typing import Any

from tpot_locust.common.version import __version__

__all__ = ["ChatUser", "CompletionsUser", "RequestTimings", "__version__"]


def __getattr__(name: str) -> Any:
    if name in ("ChatUser", "CompletionsUser"):
        from tpot_locust.harness.users import users

        return getattr(users, name)
    if name == "RequestTimings":
        from tpot_locust.common.timings import RequestTimings

        return RequestTimings
    raise AttributeError(f"module 'tpot_locust' has no attribute {name!r}")
