"""Container health checks without curl: ``python -m tpot_locust.healthcheck URL|HOST:PORT``.

An http(s) URL must answer 200 (the simulator's ``/health``, the master's web UI); a bare
``host:port`` must accept a TCP connection (a worker checks that its master is reachable).
"""

from __future__ import annotations

import socket
import sys

from tpot_locust.common.bounded_http import exchange

MAX_ANSWER_BYTES = 1024 * 1024


def check(target: str, timeout_s: float = 3.0) -> bool:
    """Whether ``target`` answers in full within ``timeout_s`` (a trickling or endless
    answer is a failed check, not a hung one)."""
    try:
        if "://" in target:
            answer = exchange(target, total_s=timeout_s, max_bytes=MAX_ANSWER_BYTES)
            return answer.status == 200  # noqa: PLR2004
        host, _, port = target.rpartition(":")
        with socket.create_connection((host, int(port)), timeout=timeout_s):
            return True
    except (OSError, ValueError):
        return False


def main(argv: list[str] | None = None) -> int:
    targets = sys.argv[1:] if argv is None else argv
    if not targets:
        print("usage: python -m tpot_locust.healthcheck URL|HOST:PORT ...", file=sys.stderr)
        return 2
    return 0 if all(check(target) for target in targets) else 1


if __name__ == "__main__":
    sys.exit(main())
