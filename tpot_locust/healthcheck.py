"""Container health checks without curl: ``python -m tpot_locust.healthcheck URL|HOST:PORT``.

An http(s) URL must answer 200 (the simulator's ``/health``, the master's web UI); a bare
``host:port`` must accept a TCP connection (a worker checks that its master is reachable).
"""

from __future__ import annotations

import socket
import sys
import urllib.request


def check(target: str, timeout_s: float = 3.0) -> bool:
    try:
        if "://" in target:
            with urllib.request.urlopen(target, timeout=timeout_s) as response:  # noqa: S310
                return response.status == 200
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
