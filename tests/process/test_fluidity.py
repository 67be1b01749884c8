"""Fluidity (issue 31): a stream with two planted 200 ms pauses against a pace; the late
tokens and the stall time are what the pauses imply, by the definition applied token by
token to the server's own write times (docs/metrics.md, "Fluidity")."""

from __future__ import annotations

from tests.helpers.scripted_server import (
    DONE,
    FINISH,
    Script,
    request,
    scripted_server,
    sse_head,
    token,
)
from tpot_locust.metrics.recorder import Recorder, RecordingRules
from tpot_locust.report.summary import build_summary
from tpot_locust.scenario.slo import Pace
from tpot_locust.wire.http_client import HTTPConnection, Origin
from tpot_locust.wire.streaming import stream_request

GAP_S, PAUSE_S, PAUSED_BEFORE = 0.005, 0.200, (8, 15)  # tokens 8 and 15 come 200 ms late
PACE = Pace(ttft_ns=50_000_000, tpot_ns=10_000_000)  # first within 50 ms, then 10 ms each


def expected(send_ns: int, arrivals_ns: list[int]) -> tuple[int, int]:
    """Late tokens and stall ns, one token at a time, as the definition says."""
    late = stall = 0
    deadline = send_ns + PACE.ttft_ns
    for arrival in arrivals_ns:
        if arrival > deadline:
            late += 1
            stall += arrival - deadline
            deadline = arrival  # the deadlines after a late token start again from it
        deadline += PACE.tpot_ns
    return late, stall


def test_planted_pauses_are_the_stalls_the_pace_sees() -> None:
    at_s = 0.002  # the script's times are from the start of the answer
    steps = [(0.0, sse_head()), (at_s, token("t1"))]
    for number in range(2, 21):
        at_s += PAUSE_S if number in PAUSED_BEFORE else GAP_S
        steps.append((at_s, token(f" t{number}")))
    script = Script([*steps, (at_s + GAP_S, FINISH + DONE)])
    recorder = Recorder(rules=RecordingRules(pace=PACE))
    with scripted_server([script]) as url:
        timings, _ = stream_request(HTTPConnection(Origin.parse(url)), request())
    assert timings.ok, timings.error_message
    recorder.record(timings)
    summary = build_summary(recorder.take_interval(final=True))
    writes = script.write_ns[1:21]  # the 20 token events (after the head)
    late, stall_ns = expected(timings.t_send_ns, writes)
    assert late == 2  # the two pauses, each once: the tokens after them are on time again
    fluidity = summary["fluidity"]
    assert fluidity["tokens"] == 20 and fluidity["late_tokens"] == late
    assert fluidity["late_requests"] == 1 and fluidity["on_time_fraction"] == 0.9
    measured = summary["metrics"]["stall_time"]
    assert measured["count"] == 1
    assert abs(measured["max"] - stall_ns / 1e6) < 1.0, (measured["max"], stall_ns / 1e6)
    # token 8 is due 120 ms after the send and comes ~230 ms after it; token 15 is due 70
    # ms after token 8 and comes 230 ms after it: ~110 + ~160 ms
    assert 250 < measured["max"] < 300, measured
