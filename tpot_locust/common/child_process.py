"""How every child process of ours starts: in its own process group, dying with its parent,
its standard input closed.

Its own group: a terminal's Ctrl-C (SIGINT to the foreground group) reaches only the parent,
which stops its children in order. On Linux each child gets SIGTERM should the parent die
without doing so (``PR_SET_PDEATHSIG``), so none is orphaned.

Standard input from ``/dev/null``: a child in a background process group that touches the
terminal is stopped by the kernel (SIGTTOU, SIGTTIN). Locust's keyboard listener puts a
terminal on its standard input in cbreak mode, which stopped the whole run in an interactive
terminal; with no terminal there, it stays off, as under ``nohup``, in CI or a container.
A child that reads our input (the server sampler) overrides ``stdin``.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
from typing import Any

_PR_SET_PDEATHSIG = 1
# what a Locust process of ours takes as "stop your users now" (harness/run/stop_now.py)
STOP_NOW_SIGNAL = getattr(signal, "SIGUSR1", signal.SIGTERM)


def _child_setup() -> None:
    """Runs in each child before it executes: die with the parent (Linux); take no
    ``STOP_NOW_SIGNAL`` until a Locust process of ours installs its handler (its default
    action ends a process: a quick second Ctrl-C at start would kill a worker with its
    results; an ignored signal stays ignored across ``exec``)."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    signal.signal(STOP_NOW_SIGNAL, signal.SIG_IGN)


def child_options() -> dict[str, Any]:
    """``subprocess.Popen`` options for a child of a run (see the module docstring)."""
    if os.name != "posix":
        return {"stdin": subprocess.DEVNULL}
    return {"stdin": subprocess.DEVNULL, "preexec_fn": _child_setup, "process_group": 0}
