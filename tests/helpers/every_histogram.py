"""A run, fed to a real ``Recorder`` as a run feeds it, in which every histogram the
catalogue declares gets samples: a world of requests (``attribution_world``) with every
kind of cause window, a stall over a gap and one over a prefill, open-loop, reasoning and
kernel-stamped requests, and a reading pace."""

from __future__ import annotations

from dataclasses import dataclass

from tests.helpers.attribution_world import MS, Extra, Req, World, brute_gaps, make_world, play
from tpot_locust.common.timings import RequestTimings
from tpot_locust.metrics.causes import GPU_THROTTLE, KV_OFFLOAD, SERVER_GC, SERVER_PAUSE
from tpot_locust.metrics.metric_set import MetricSet
from tpot_locust.metrics.recorder import Recorder, RecordingRules
from tpot_locust.scenario.slo import Pace


@dataclass
class RichReq(Req):
    """A request of the world that was also an open-loop arrival, reasoned over its first
    events and had its reads' delays stamped by the kernel."""

    def timings(self) -> RequestTimings:
        timings = super().timings()
        timings.scheduled = True
        timings.t_intended_ns = timings.t_send_ns - 3 * MS
        timings.reasoning_tokens = sum(self.counts[:3])
        timings.answer_stamp_ns = timings.token_stamps[3]
        timings.read_delays_ns.extend([20_000, 45_000])
        return timings


def every_histogram_world(seed: int = 2, requests: int = 40) -> World:
    world = make_world(seed, requests)
    # long gaps that overlap nothing, the longest first: the stall's, then one for each of
    # the server's other windows, which name a cause only where they explain the gap
    quiet = sorted(
        (g for g in brute_gaps(world) if not g.causes and g.itl_us >= 20_000),
        key=lambda gap: -gap.itl_us,
    )
    spans = []
    for gap in quiet[:5]:
        stamps = next(r for r in world.requests if r.request_id == gap.request_id).stamps
        spans.append((stamps[gap.index], stamps[gap.index + 1]))
    world.stall = (spans[0][0] + 5 * MS, spans[0][0] + 15 * MS)  # the request's largest gap
    for number, (kind, size) in enumerate(
        ((SERVER_PAUSE, 3.0), (SERVER_GC, 1.0), (KV_OFFLOAD, 1.0), (GPU_THROTTLE, 50.0))
    ):
        start, end = spans[number + 1][0] + 1 * MS, spans[number + 1][1] - 1 * MS
        world.extras.append(Extra(kind, f"{kind}-x", start, end, size))
        if kind in (SERVER_GC, KV_OFFLOAD):  # a silence every stream waited out, while...
            world.extras.append(Extra(SERVER_PAUSE, f"pause-{kind}", start, end, 3.0))
    world.requests = [
        RichReq(**vars(r)) if number % 4 == 0 else r for number, r in enumerate(world.requests)
    ]
    return world


def every_histogram_run(seed: int = 2) -> MetricSet:
    """The run's totals, as the master holds them (deltas through the wire form)."""
    world = every_histogram_world(seed)
    recorder = Recorder(rules=RecordingRules(pace=Pace(40 * MS, 2 * MS)))
    # a stall over a prefill (send to first token): TTFT's samples are set aside too
    first = world.requests[0]
    recorder.on_stall(first.send + 1 * MS, first.stamps[0] - 1 * MS)
    (total,) = play(world, [recorder], lambda item: [0], learning=True)  # a throttle's step
    return total
