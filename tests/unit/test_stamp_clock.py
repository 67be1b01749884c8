"""One clock from the wire to the report: every stamp a listener and the recorder see is on
the stamp clock (``common.clock``), wall-clock ns that no step of the wall clock moves."""

from __future__ import annotations

import time

import numpy as np
import pytest
from locust.event import EventHook

from tests.helpers.scripted_server import DONE, FINISH, Script, scripted_server, sse_head, token
from tests.helpers.scripted_server import request as stream_request_of
from tpot_locust.common import clock
from tpot_locust.common.clock import from_perf_ns, stamp_ns, wall_drift_ns
from tpot_locust.events import PrefillWindow
from tpot_locust.metrics.causes import PREFILL
from tpot_locust.metrics.recorder import Recorder
from tpot_locust.wire import stamped_socket
from tpot_locust.wire.http_client import HTTPConnection, Origin
from tpot_locust.wire.streaming import stream_request

SLACK_NS = 50_000_000  # the wall clock's drift from the stamp clock over a test, and more


def test_the_stamp_clock_reads_as_the_wall_clock_and_never_goes_back() -> None:
    readings = [stamp_ns() for _ in range(1000)]
    assert readings == sorted(readings)
    assert abs(stamp_ns() - time.time_ns()) < SLACK_NS
    assert abs(from_perf_ns(time.perf_counter_ns()) - stamp_ns()) < SLACK_NS
    assert abs(wall_drift_ns()) < SLACK_NS


def test_a_wall_clock_step_moves_no_stamp(monkeypatch: pytest.MonkeyPatch) -> None:
    before = stamp_ns()
    wall_ns = time.time_ns
    monkeypatch.setattr(clock.time, "time_ns", lambda: wall_ns() + 3_600 * 10**9)
    assert wall_drift_ns() > 3_000 * 10**9  # the wall went an hour on: a kernel stamp would too
    after = stamp_ns()
    assert 0 <= after - before < SLACK_NS


def test_a_stream_is_stamped_in_wall_clock_ns_that_a_listener_reads_as_they_are() -> None:
    """The send, each token and the end, as a ``token_timings`` listener gets them: each
    between the wall clock before the request and after it (kernel or segment stamps too:
    converted once, at the read)."""
    steps = [(0.0, sse_head())] + [(0.01 + i * 0.002, token(" w")) for i in range(20)]
    script = Script([*steps, (0.06, FINISH + DONE)])
    before = time.time_ns()
    with scripted_server([script]) as url:
        connection = HTTPConnection(Origin.parse(url))
        timings, _ = stream_request(connection, stream_request_of())
        connection.close()
    after = time.time_ns()
    assert timings.ok, timings.error_message
    stamps = [timings.t_send_ns, *timings.token_stamps, timings.t_end_ns]
    assert stamps == sorted(stamps)
    assert before - SLACK_NS <= stamps[0] and stamps[-1] <= after + SLACK_NS
    # the server's own writes, on the same clock: each token stamped after it was written
    lateness_ms = [
        (s - w) / 1e6 for s, w in zip(timings.token_stamps, script.write_ns[1:21], strict=True)
    ]
    assert all(-0.1 < late < 50 for late in lateness_ms), lateness_ms


def test_the_recorder_lines_a_prefill_window_up_with_gaps_unconverted() -> None:
    """A prefill window fired as ``ChatUser`` fires it and a request's stamps reach the
    cause timeline as they were stamped: the window is where the gaps are, in wall ns."""
    recorder = Recorder()
    hook = EventHook()
    hook.add_listener(recorder.on_prefill)
    window = PrefillWindow(hook, "r1", 512, False)
    time.sleep(0.01)
    first_token = stamp_ns()
    window.first_token(first_token)
    assert abs(window.start_ns - time.time_ns()) < SLACK_NS
    # a gap inside the window (as the recorder holds a request's gaps: its stamps as they
    # are) overlaps it; one a millisecond after it does not
    inside, after = window.start_ns + 1_000, first_token + 1_000_000
    causes = recorder.causes.tags(np.array([inside, after]), np.array([inside + 10, after + 10]))
    assert causes.masks[PREFILL].tolist() == [True, False]
    assert causes.prefill_tokens.tolist() == [512, 0]


def test_the_kernel_stamp_is_taken_less_the_drift_at_the_send(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A kernel stamp (wall) becomes a stamp by the drift taken at the request's send: a
    step of the wall clock before that send moves none of its stamps."""
    monkeypatch.setattr(stamped_socket, "wall_drift_ns", lambda: 7_000)
    sock = stamped_socket.StampedSocket.__new__(stamped_socket.StampedSocket)
    sock._last_stamp_ns = 0
    sock.begin_request()  # the send: its drift taken
    now = stamp_ns()
    assert sock._arrival_ns(now - 1_000 + 7_000, now) == now - 1_000
