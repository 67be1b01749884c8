"""``python -m tpot_locust.sim``: run the simulator until SIGTERM/SIGINT."""

from __future__ import annotations

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
