"""Bodies read by the event loop's callback give what a reading greenlet gives, and stop
cleanly: timeouts, resets, framing errors, a killed user, many streams at once."""

from __future__ import annotations

from gevent import monkey

monkey.patch_all()  # as in a Locust worker: the loop reader needs gevent's sockets

import dataclasses  # noqa: E402
import time  # noqa: E402
from collections.abc import Iterator  # noqa: E402
from contextlib import contextmanager  # noqa: E402

import gevent  # noqa: E402
import pytest  # noqa: E402

from tests.helpers.scripted_server import (  # noqa: E402
    DONE,
    FINISH,
    Script,
    chunk,
    request,
    scripted_server,
    sse_head,
    token,
)
from tpot_locust.common import env_vars  # noqa: E402
from tpot_locust.common.clock import stamp_ns  # noqa: E402
from tpot_locust.common.errors import (  # noqa: E402
    BAD_HTTP,
    BAD_JSON,
    CONNECTION_RESET,
    TIMEOUT_FIRST_TOKEN,
    TIMEOUT_IDLE,
    TIMEOUT_TOTAL,
    TRUNCATED,
)
from tpot_locust.common.timings import RequestTimings  # noqa: E402
from tpot_locust.wire import loop_reads  # noqa: E402
from tpot_locust.wire.http_client import HTTPConnection, Origin  # noqa: E402
from tpot_locust.wire.segment_stamps import process_tap  # noqa: E402
from tpot_locust.wire.streaming import stream_request  # noqa: E402


@pytest.fixture(params=["loop", "greenlet"])
def loop_reads_taken(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Runs the test with each read path; lists every body the loop reader waited for."""
    monkeypatch.setattr(loop_reads, "ENABLED", request.param == "loop")
    taken: list[int] = []
    wait = loop_reads._LoopRead.wait

    def counted(self: loop_reads._LoopRead) -> None:
        taken.append(1)
        wait(self)

    monkeypatch.setattr(loop_reads._LoopRead, "wait", counted)
    return taken


def tokens(count: int, every_s: float, start_s: float = 0.0) -> list[tuple[float, bytes]]:
    return [(start_s + i * every_s, token(f" t{i}")) for i in range(count)]


def stream(steps: list[tuple[float, bytes]], end: bytes = FINISH + DONE) -> Script:
    return Script([(0.0, sse_head()), *steps, (steps[-1][0] if steps else 0.0, end)])


@contextmanager
def read_in_batches(period_s: float) -> Iterator[None]:
    """Bodies read in batches every ``period_s`` within the block, as before after it."""
    loop_reads.use_read_batch(period_s)
    try:
        yield
    finally:
        loop_reads.use_read_batch(None)


def run_on_one_connection(scripts: list[Script], **timeouts: float) -> list[RequestTimings]:
    with scripted_server(scripts) as url:
        connection = HTTPConnection(Origin.parse(url))
        results = [stream_request(connection, request(**timeouts))[0] for _ in scripts]
        connection.close()
    return results


# fmt: off
CASES = {  # the script, the error category it must give, the token events kept
    "complete": (stream(tokens(20, 0.002)), None, 20),
    "closed mid-stream": (Script([(0.0, sse_head()), *tokens(3, 0.002)]), TRUNCATED, 3),
    "reset mid-stream": (
        Script([(0.0, sse_head()), *tokens(3, 0.002)], reset=True), CONNECTION_RESET, 3),
    "bad chunk size after tokens": (
        Script([(0.0, sse_head()), (0.01, token(" a") + b"zz\r\n")]), BAD_HTTP, 1),
    "bad JSON after tokens": (
        stream(tokens(2, 0.002), chunk(b"data: {x\n\n") + DONE), BAD_JSON, 2),
    "idle timeout": (
        Script([(0.0, sse_head()), *tokens(2, 0.01), (1.5, token(" late"))]), TIMEOUT_IDLE, 2),
    "first-token timeout": (
        Script([(0.0, sse_head()), (1.5, token(" late"))]), TIMEOUT_FIRST_TOKEN, 0),
}
# fmt: on


@pytest.mark.parametrize("case", CASES)
def test_each_ending_is_the_same_on_both_paths(loop_reads_taken: list[int], case: str) -> None:
    script, category, events = CASES[case]
    (timings,) = run_on_one_connection([script], first_token_timeout=0.3, idle_timeout=0.3)
    assert timings.error_category == category, timings.error_message
    assert len(timings.token_stamps) == events
    assert loop_reads_taken == ([1] if loop_reads.ENABLED else [])


def test_stamps_follow_the_writes(loop_reads_taken: list[int]) -> None:
    script = stream(tokens(30, 0.004))
    (timings,) = run_on_one_connection([script])
    assert timings.ok, timings.error_message
    token_writes = script.write_ns[1:31]
    lateness_ms = [(s - w) / 1e6 for s, w in zip(timings.token_stamps, token_writes, strict=True)]
    assert all(-0.1 < late < 20 for late in lateness_ms), lateness_ms
    assert sorted(lateness_ms)[15] < 2  # the median read is prompt, not batched


def test_a_complete_body_leaves_the_connection_open_for_reuse(loop_reads_taken: list[int]) -> None:
    script = Script(
        [(0.0, sse_head()), *tokens(3, 0.005)] + [(0.02, FINISH + DONE)], keep_open_s=2.0
    )
    with scripted_server([script]) as url:
        connection = HTTPConnection(Origin.parse(url))
        timings, _ = stream_request(connection, request())
        assert timings.ok, timings.error_message
        assert connection.connected  # kept for the next request
        connection.close()
    assert loop_reads_taken == ([1] if loop_reads.ENABLED else [])


def test_a_moving_deadline_neither_fires_early_nor_late(loop_reads_taken: list[int]) -> None:
    # events every 50 ms for 0.6 s under a 0.2 s idle timeout: the one timer keeps moving
    steady = stream(tokens(12, 0.05))
    stall = Script([(0.0, sse_head()), *tokens(3, 0.05), (2.0, token(" late"))])
    started = time.perf_counter()
    ok, stalled = run_on_one_connection([steady, stall], idle_timeout=0.2)
    assert ok.ok and len(ok.token_stamps) == 12, ok.error_message
    assert stalled.error_category == TIMEOUT_IDLE
    idle_s = (stalled.t_end_ns - stalled.token_stamps[-1]) / 1e9
    assert 0.2 <= idle_s < 0.6, idle_s
    assert time.perf_counter() - started < 3


def test_total_timeout_ends_a_stream_that_never_stalls(loop_reads_taken: list[int]) -> None:
    (timings,) = run_on_one_connection([stream(tokens(40, 0.02))], total_timeout=0.3)
    assert timings.error_category == TIMEOUT_TOTAL
    assert 5 < len(timings.token_stamps) < 40


@pytest.fixture
def hub_errors(capfd: pytest.CaptureFixture[str]) -> Iterator[None]:
    yield
    assert "Traceback" not in capfd.readouterr().err


def test_a_killed_reader_stops_watching_its_socket(hub_errors: None) -> None:
    script = stream(tokens(50, 0.01))
    with scripted_server([script, stream(tokens(3, 0.001))]) as url:
        connection = HTTPConnection(Origin.parse(url))
        reader = gevent.spawn(stream_request, connection, request())
        gevent.sleep(0.15)  # mid-stream: the loop is reading for it
        reader.kill()  # as Locust stops a user
        assert not connection.connected  # the rest of the body will never be read: closed
        gevent.sleep(0.2)  # the server writes on; no callback may run for the dead reader
        after, _ = stream_request(connection, request())
    assert after.ok and len(after.token_stamps) == 3, after.error_message


def test_many_streams_at_once_each_get_their_own_events(loop_reads_taken: list[int]) -> None:
    count = 24
    scripts = [stream(tokens(25, 0.005, start_s=i * 0.001)) for i in range(count)]
    with scripted_server(scripts) as url:
        connections = [HTTPConnection(Origin.parse(url)) for _ in range(count)]
        jobs = [gevent.spawn(stream_request, c, request()) for c in connections]
        gevent.joinall(jobs, timeout=20, raise_error=True)
    results = [job.value for job in jobs]
    assert all(t.ok and len(t.token_stamps) == 25 for t, _ in results)
    assert all(text == "".join(f" t{i}" for i in range(25)) for _, text in results)
    assert len(loop_reads_taken) == (count if loop_reads.ENABLED else 0)


@pytest.mark.skipif(process_tap() is None, reason="no segment tap here (needs CAP_NET_RAW)")
def test_batched_reads_keep_each_events_own_stamp() -> None:
    # 40 events 2 ms apart, read every 20 ms: several events a read, each stamped by the
    # segment that brought it, and the read delay counted from when each batch was due
    script = stream(tokens(40, 0.002))
    with read_in_batches(0.02):
        (timings,) = run_on_one_connection([script])
    assert timings.ok, timings.error_message
    assert timings.arrival_clock == "segment"
    writes = script.write_ns[1:41]
    lateness_ms = [(s - w) / 1e6 for s, w in zip(timings.token_stamps, writes, strict=True)]
    assert all(-0.1 < late < 3 for late in lateness_ms), lateness_ms  # not the batch's 20 ms
    assert len(timings.read_delays_ns) <= 12  # the head's read(s) and ~5 batches, not 40
    assert max(timings.read_delays_ns) < 15e6


@pytest.mark.skipif(process_tap() is None, reason="no segment tap here (needs CAP_NET_RAW)")
def test_a_server_is_not_held_back_by_a_batch_it_waits_for() -> None:
    """150 events 0.5 ms apart read in 50 ms batches: the kernel acknowledges each segment
    as it arrives (``ack_on_arrival``), so the server's congestion window never fills with
    segments waiting for a read's acknowledgement, and no token leaves late. Without it,
    tokens were held back until the next batch's read (9-26 ms late and more)."""
    script = stream(tokens(150, 0.0005))
    with read_in_batches(0.05):
        (timings,) = run_on_one_connection([script])
    assert timings.ok, timings.error_message
    writes = script.write_ns[1:151]
    lateness_ms = [(s - w) / 1e6 for s, w in zip(timings.token_stamps, writes, strict=True)]
    assert max(lateness_ms) < 5, sorted(lateness_ms)[-10:]  # held back: 9-26 ms and more


@pytest.mark.skipif(process_tap() is None, reason="no segment tap here (needs CAP_NET_RAW)")
def test_a_batch_reads_only_the_sockets_the_tap_saw_data_come_to(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A stream whose first token comes 0.3 s after its head, read in 10 ms batches: its
    socket is read when the tap saw data come, and while quiet only every 0.1 s (to find a
    close), not in each of the ~30 batches (a read of an empty socket is a system call)."""
    reads: list[int] = []
    on_readable = loop_reads._LoopRead._on_readable

    def counted(self: loop_reads._LoopRead, batch: object = None) -> bool:
        reads.append(1)
        return on_readable(self, batch)  # type: ignore[arg-type]

    monkeypatch.setattr(loop_reads._LoopRead, "_on_readable", counted)
    script = stream(tokens(5, 0.002, start_s=0.3))
    with read_in_batches(0.01):
        (timings,) = run_on_one_connection([script])
    assert timings.ok, timings.error_message
    assert len(timings.token_stamps) == 5
    assert len(reads) <= 10, len(reads)  # ~3 quiet reads, the tokens' and the end's


needs_tap = pytest.mark.skipif(
    process_tap() is None, reason="no segment tap here (needs CAP_NET_RAW)"
)


@needs_tap
def test_bodies_are_read_in_batches_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    """As installed (no variable set), a plain body on the segment clock is read in batches:
    the path that costs the raw reader's CPU per token event (benchmarks/README.md)."""
    monkeypatch.delenv(env_vars.READ_BATCH_MS, raising=False)
    loop_reads.use_read_batch(None)
    (timings,) = run_on_one_connection([stream(tokens(30, 0.002))])
    assert timings.ok, timings.error_message
    assert timings.read_in_batches
    assert loop_reads.read_batch_period_s() == pytest.approx(0.04)


@needs_tap
def test_a_batched_bodys_first_read_and_end_are_noticed_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Read in 0.5 s batches, a body's first token (0.1 s after its head) is read as it comes,
    and its end (the last chunk, heard by the end watch) too: the user's next request is not
    held back by the batch period. Without them, each waited up to 0.5 s."""
    reads: list[tuple[int, bool]] = []
    on_readable = loop_reads._LoopRead._on_readable

    def noted(self: loop_reads._LoopRead, batch: object = None) -> bool:
        reads.append((stamp_ns(), batch is not None))
        return on_readable(self, batch)  # type: ignore[arg-type]

    monkeypatch.setattr(loop_reads._LoopRead, "_on_readable", noted)
    script = stream(tokens(10, 0.01, start_s=0.1))
    with read_in_batches(0.5), scripted_server([script]) as url:
        connection = HTTPConnection(Origin.parse(url))
        timings = stream_request(connection, request())[0]
        returned_ns = stamp_ns()
        connection.close()
    assert timings.ok, timings.error_message
    assert timings.read_in_batches
    first_read_ns, first_batched = reads[0]
    assert not first_batched
    assert (first_read_ns - script.write_ns[1]) / 1e6 < 50  # not the batch's 500 ms
    end_written_ns = script.write_ns[-1]
    assert (returned_ns - end_written_ns) / 1e6 < 50  # heard by the end watch, read at once
    assert len(timings.token_stamps) == 10


@needs_tap
def test_a_deadline_counts_what_waits_for_its_batch() -> None:
    """Tokens 0.2 s apart read in 0.5 s batches with an idle timeout of 0.3 s: what came is
    read before the deadline is judged, so none times out (the deadline is the stamps')."""
    script = stream(tokens(4, 0.2))
    with read_in_batches(0.5):
        (timings,) = run_on_one_connection([script], idle_timeout=0.3)
    assert timings.ok, timings.error_message
    assert len(timings.token_stamps) == 4


@needs_tap
def test_a_body_cut_by_its_users_stop_keeps_what_came_before_its_batch() -> None:
    """Read in 0.5 s batches, a stream cut 0.3 s in (its user stopped, as at the end of a
    run) keeps the ~25 tokens that had arrived, not only its first read's: what came
    inside the window counts whether or not a batch had read it yet."""
    cut: list[RequestTimings] = []
    script = stream(tokens(60, 0.01, start_s=0.05))
    with read_in_batches(0.5), scripted_server([script]) as url:
        connection = HTTPConnection(Origin.parse(url))
        streaming = dataclasses.replace(request(), on_cut=cut.append)
        reader = gevent.spawn(stream_request, connection, streaming)
        gevent.sleep(0.3)
        reader.kill()
        connection.close()
    (timings,) = cut
    assert 20 <= len(timings.token_stamps) <= 30, len(timings.token_stamps)
    writes = script.write_ns[1 : 1 + len(timings.token_stamps)]
    lateness_ms = [(s - w) / 1e6 for s, w in zip(timings.token_stamps, writes, strict=True)]
    assert max(lateness_ms) < 5, lateness_ms  # each its own arrival, not the cut's


@needs_tap
def test_a_batch_is_done_in_slices_that_leave_the_loop_free(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With slices of one socket and one tap copy, 12 streams read in 10 ms batches still
    get every token with its own stamp: a batch goes on where its last slice stopped."""
    monkeypatch.setattr(loop_reads, "_SLICE_NS", 0)
    monkeypatch.setattr(loop_reads, "_SLICE_COPIES", 1)
    scripts = [stream(tokens(25, 0.003)) for _ in range(12)]
    with read_in_batches(0.01), scripted_server(scripts) as url:

        def one() -> RequestTimings:
            connection = HTTPConnection(Origin.parse(url))
            try:
                return stream_request(connection, request())[0]
            finally:
                connection.close()

        jobs = [gevent.spawn(one) for _ in scripts]
        gevent.joinall(jobs, raise_error=True)
    results = [job.value for job in jobs]
    assert all(t.ok and len(t.token_stamps) == 25 and t.read_in_batches for t in results)


@pytest.mark.parametrize(
    ("value", "period_s"), [("", 0.04), ("0", 0.0), (" 2.5 ", 0.0025), ("10", 0.01)]
)
def test_the_read_batch_is_read_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, value: str, period_s: float
) -> None:
    monkeypatch.setenv(env_vars.READ_BATCH_MS, value)
    assert loop_reads.read_batch_s() == pytest.approx(period_s)


@pytest.mark.parametrize("value", ["fast", "-1", "nan", "inf", "1001"])
def test_a_bad_read_batch_is_refused_by_name(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv(env_vars.READ_BATCH_MS, value)
    with pytest.raises(ValueError, match="TPOT_LOCUST_READ_BATCH_MS=.*not a number of ms"):
        loop_reads.read_batch_s()
