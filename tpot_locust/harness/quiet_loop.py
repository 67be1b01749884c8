"""One-off work of the harness moved away from the moments streams are being read.

The event loop that stamps token events is the one Locust, gevent and our listeners run
on; whatever holds it for milliseconds while streams run merges token events into one
read and stretches one gap over the stall (``stalls``). Each cause here was measured with
``TPOT_STALL_TRACE=1`` (benchmarks/README.md, section ``tail_truth``):

- a full garbage collection walked every object of Locust, gevent and numpy (~70 ms):
  done once at init, before any stream; test start only freezes what is alive;
- Locust's ``Runner.stop()`` calls ``inspect.stack()`` for a debug line even with debug
  logging off; its first call maps every loaded module's file (25-70 ms) while the last
  requests still stream. One call at test start fills those caches; the stop's own call
  then takes well under a millisecond.
"""

from __future__ import annotations

import gc
import inspect


def collect_garbage_now() -> None:
    """A full collection before anything streams (at init)."""
    gc.collect()


def quiet_garbage_collector() -> None:
    """Keep full GC passes off the stamping path: objects alive at test start are frozen
    out of collection (a full pass over them paused the loop 31-70 ms, measured); the rest
    collect as usual. No collection here: the one at init has cleared what it could."""
    gc.freeze()


def warm_stop_path() -> None:
    """Fill ``inspect``'s module-file map and line cache, which ``Runner.stop()`` uses."""
    inspect.stack()


def before_streams_start() -> None:
    quiet_garbage_collector()
    warm_stop_path()
