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
  then takes well under a millisecond;
- the first request's connection opened this process's segment tap and its ring (17-30
  ms, the kernel allocating the ring; ~150 ms on a busy CI machine) and imported its API's
  module (~5 ms): the first request of a trace went out that late. A process that reads
  streams opens its tap and body batcher at init; every API's module is imported then.
"""

from __future__ import annotations

import gc
import inspect

from tpot_locust.apis import dialects
from tpot_locust.wire.loop_reads import read_batch_period_s
from tpot_locust.wire.segment_stamps import arrival_clock


def collect_garbage_now() -> None:
    """A full collection before anything streams (at init)."""
    gc.collect()


def open_readers() -> None:
    """What the first request would open or import, opened now (at init, in a process that
    reads streams): the segment tap with its ring, the body batcher, every API's module."""
    arrival_clock()
    read_batch_period_s()
    dialects()


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
