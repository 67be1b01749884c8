"""Live streams followed at each take: their tokens, and their gaps, each taken once."""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field

import numpy as np

from tpot_locust.common.timings import RequestTimings
from tpot_locust.metrics.recorder import Recorder
from tpot_locust.metrics.token_flow import TokenFlow

MS = 1_000_000


@dataclass
class Stream:
    """A stream as ``wire.streaming`` shows it while it goes."""

    t_send_ns: int = 0
    answer_stamp_ns: int | None = None  # before it: reasoning
    token_stamps: array[int] = field(default_factory=lambda: array("q"))
    token_counts: array[int] = field(default_factory=lambda: array("q"))

    def arrive(self, *stamps_ms: float, tokens: int = 1) -> None:
        for stamp in stamps_ms:
            self.token_stamps.append(int(stamp * MS))
            self.token_counts.append(tokens)

    def stamps_recovered(self) -> bool:
        return False

    def retransmitted(self) -> bool:
        return False


def test_token_flow_counts_live_streams_at_each_take() -> None:
    flow = TokenFlow()
    stream = Stream()
    stream.arrive(1, 2)
    flow.start("a", "chat", stream)
    assert flow.take()[0] == {"chat": 2}
    stream.arrive(3, tokens=3)
    stream.arrive(4)
    assert flow.take()[0] == {"chat": 4}
    stream.arrive(5)
    flow.end("a")  # the last event arrived after the last take: counted at the next
    assert flow.take()[0] == {"chat": 1}
    assert flow.take()[0] == {}
    other = Stream()
    other.arrive(1)
    flow.start("b", "chat", other)
    other.token_counts = array("q", [3])  # the decoder replaced the counts at the end
    flow.end("b")
    assert flow.take()[0] == {"chat": 3}


def test_each_gap_is_taken_once_the_newest_when_its_successor_came() -> None:
    flow = TokenFlow()
    stream = Stream(t_send_ns=0)
    flow.start("a", "chat", stream)
    stream.arrive(10, 12, 15)
    (first,) = flow.take()[1]  # gaps 10-12 and 12-15: only the first (15's successor?)
    assert first.first_gap == 0 and first.stamps.tolist() == [10 * MS, 12 * MS]
    assert first.counts.tolist() == [1] and first.first_tokens == 1
    assert flow.take()[1] == []  # nothing new
    stream.arrive(15, 20)  # 15 again: a read that returned two events
    (second,) = flow.take()[1]
    assert second.first_gap == 1 and second.stamps.tolist() == [12 * MS, 15 * MS, 15 * MS]
    assert second.shared_next is False and second.first_tokens == 0
    flow.end("a")
    assert flow.finished("a") == 3  # the recorder takes gap 3 (15-20) on
    assert flow.finished("never followed") == 0


def test_a_stream_longer_than_the_run_is_measured_while_it_goes() -> None:
    """The recorder reports a live stream's gaps each interval, and the rest once it is
    recorded: each gap once, none lost, whatever the request's end."""
    recorder = Recorder()
    stream = Stream(t_send_ns=0, answer_stamp_ns=50 * MS)  # thinking until 50 ms
    recorder.token_flow.start("r-1", "chat", stream)
    stream.arrive(*range(5, 105, 5))  # 20 events, 5 ms apart
    taken = recorder.take_interval().classes["chat"]
    live = taken.histograms["itl"]
    assert (taken.counters.window_tokens, taken.counters.window_reasoning_tokens) == (19, 9)
    assert live.total_count == 18 and np.isclose(live.get_value_at_percentile(50), 5000, rtol=1e-3)
    stream.arrive(110, 111)
    recorder.token_flow.end("r-1")
    cut = RequestTimings(
        "chat",
        "chat",
        "r-1",
        0,
        0,
        stream.token_stamps,
        stream.token_counts,
        error_category="interrupted",
        t_end_ns=200 * MS,
        answer_stamp_ns=50 * MS,
    )
    recorder.record(cut)
    interval = recorder.take_interval().classes["chat"]
    rest = interval.histograms["itl"]
    assert rest.total_count == 3  # 95-100, 100-110, 110-111
    assert np.isclose(rest.get_max_value(), 10_000, rtol=1e-3)
    assert interval.counters.cut_at_stop == 1 and interval.counters.window_gaps == 3
    assert interval.histograms["ttft"].total_count == 1  # sent and answered: its TTFT counts
    assert "e2e" not in interval.histograms  # a cut request has no E2E
