"""How every child process of ours starts: in its own process group, dying with its parent.

Its own group: a terminal's Ctrl-C (SIGINT to the foreground group) reaches only the parent,
which stops its children in order. On Linux each child gets SIGTERM should the parent die
without doing so (``PR_SET_PDEATHSIG``), so none is orphaned.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from typing import Any

_PR_SET_PDEATHSIG = 1


def _child_setup() -> None:
    """Runs in each child before it executes: die with the parent (Linux)."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def child_options() -> dict[str, Any]:
    """``subprocess.Popen`` options for a child of a run (see the module docstring)."""
    if os.name != "posix":
        return {}
    return {"preexec_fn": _child_setup, "process_group": 0}
