"""A supervised Locust process never outlives ``tpot-locust``, even with its loop wedged.

``common.child_process`` has the kernel send SIGTERM when the parent dies, and Locust
handles it on its gevent loop: a loop that cannot run (a timer given NaN wedged every
timer) never does. This native thread, outside the loop, notices the parent is gone and
ends the process once a grace period for the normal shutdown has passed.
"""

from __future__ import annotations

import os
import sys

from gevent import monkey

POLL_S = 1.0
GRACE_S = 60.0  # the stop timeout, every worker's final delta and the results, with room


def watch_parent(grace_s: float = GRACE_S) -> None:
    """Start the watch (once per process) for the parent this process has now."""
    parent = os.getppid()
    start_thread = monkey.get_original("_thread", "start_new_thread")
    start_thread(_watch, (parent, grace_s))


def _watch(parent: int, grace_s: float) -> None:
    sleep = monkey.get_original("time", "sleep")
    while os.getppid() == parent:
        sleep(POLL_S)
    sleep(grace_s)  # the SIGTERM the kernel sent ends a healthy process well before this
    print(
        f"tpot-locust: the supervising process {parent} is gone and this one did not stop "
        f"within {grace_s:g} s: exiting",
        file=sys.stderr,
        flush=True,
    )
    os._exit(1)
