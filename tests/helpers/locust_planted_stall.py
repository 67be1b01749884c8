"""Locustfile for the planted-stall test: streams of 3 ms gaps, and once, mid-run, a
greenlet that holds the event loop for 40 ms (as a slow listener or a GC pass would).
Every successful request's stamps go to ``STAMPS_FILE`` (a ``token_timings`` listener), so
the test can hold each measured gap against its own truth."""

import gc
import json
import os

import gevent
from gevent import monkey
from locust import constant, events

import tpot_locust.plugin  # noqa: F401  (records and reports our metrics)
from tpot_locust import ChatUser

STALL_AFTER_S = float(os.environ.get("PLANTED_STALL_AFTER_S", "5"))
STALL_S = 0.040
_blocking_sleep = monkey.get_original("time", "sleep")


class Streams(ChatUser):
    wait_time = constant(0)
    prompt_tokens = 64
    output_tokens = 256
    turns = 1


# PLANTED_STALL_KIND=gc: the hold is a full garbage collection of a heap of cycles made
# after the test start's freeze (a client GC the report must name as one)
STALL_KIND = os.environ.get("PLANTED_STALL_KIND", "sleep")


def _hold_the_loop() -> None:
    gevent.sleep(STALL_AFTER_S)
    if STALL_KIND == "gc":
        heap = []
        for _ in range(400_000):
            cycle: list = []
            cycle.append(cycle)
            heap.append(cycle)
        del heap, cycle
        gc.collect()  # walks the cycles: tens of milliseconds with the loop held
        return
    _blocking_sleep(STALL_S)


@events.test_start.add_listener
def _plant(environment, **_):
    gevent.spawn(_hold_the_loop)


_stamps = open(os.environ["STAMPS_FILE"], "w") if os.environ.get("STAMPS_FILE") else None  # noqa: SIM115


@events.token_timings.add_listener
def _keep_stamps(timings, **_):
    if _stamps is not None and timings.token_stamps:  # cut by the stop too: its gaps count
        record = {"id": timings.request_id, "stamps": list(timings.token_stamps)}
        _stamps.write(json.dumps(record) + "\n")
        _stamps.flush()
