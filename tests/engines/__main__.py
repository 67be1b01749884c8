"""``python -m tests.engines prepare [vllm|transformers]`` builds the engines' environments
and the tiny model (minutes, once); ``python -m tests.engines serve ENGINE [ARGS...]``
serves the tiny model on 127.0.0.1 until Ctrl-C, printing its URL."""

from __future__ import annotations

import signal
import sys
import tempfile
import time
from pathlib import Path

from tests.engines import envs, servers


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in ("prepare", "serve"):
        print(__doc__)
        return 2
    if argv[0] == "prepare":
        for engine in argv[1:] or list(envs.ENGINES):
            print(f"{engine}: {envs.ensure(engine)}")
        print(f"tiny model: {servers.tiny_model()}")
        return 0
    engine, extra = argv[1], argv[2:]
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # stop the engine on SIGTERM too
    with tempfile.TemporaryDirectory() as logs, servers.serve(engine, Path(logs), extra) as server:
        print(
            f"{engine} serves the tiny model as {servers.MODEL_NAME!r} at {server.url}", flush=True
        )
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
