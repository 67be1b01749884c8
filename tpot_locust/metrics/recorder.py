"""Recorder: HDR histograms per metric x metric group (a user class, or a class and its
model: ``common.metric_groups``), following HdrHistogram's Recorder.

Aggregation yields to the gevent hub between batches (``let_streams_run``), so that
bucketing never holds up the stamping of token events for more than one batch.

Finished requests add their samples to the *interval* set (``metric_set``; their gaps'
causes, phases and stalls a little later, through ``gap_tagging``); ``take_interval`` swaps
in a fresh set and returns the finished one (a delta). A worker ships deltas to the master; the
master (or a local run) adds deltas into its totals. Samples are buffered as numpy arrays
and bucketed in bulk, so the per-token cost is an append, not a ``record_value`` call.
"""

from __future__ import annotations

import time
from array import array
from collections import deque
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from tpot_locust.common import metric_catalogue as catalogue
from tpot_locust.common.clock import ARRIVAL_CLOCKS
from tpot_locust.common.cooperation import WorkSlices, let_streams_run
from tpot_locust.common.errors import INTERRUPTED, TIMEOUT_IDLE, TIMEOUT_TOTAL
from tpot_locust.common.metric_groups import metric_group
from tpot_locust.common.timings import RequestTimings, to_us
from tpot_locust.metrics.causes import FAILED_END, PREFILL, CauseWindow
from tpot_locust.metrics.fluidity import ReadingPace, token_deadlines
from tpot_locust.metrics.gap_tagging import GapTagger, HeldGaps, TaggedSamples, read_together
from tpot_locust.metrics.histogram_names import PREFILL_AT_GAP, phase_metric
from tpot_locust.metrics.histograms import record_many, warm_up
from tpot_locust.metrics.metric_set import (
    ARRIVAL_CLOCK_COUNTERS,
    CUT_WHERE,
    MAX_INTERRUPTED_IDS,
    ClassCounters,
    MetricSet,
    count_tokens,
)
from tpot_locust.metrics.phases import NO_END_NS, PHASES, RunClock
from tpot_locust.metrics.samples import first_token_scalars, gap_samples_us, whole_scalars
from tpot_locust.metrics.token_flow import LiveGaps, TokenFlow

FLUSH_PENDING_VALUES = 100_000
BUCKET_SLICE = 4096  # values bucketed between two yields


class LagSource(Protocol):
    """What the recorder needs of the loop probe: the lags since the last call, the time
    their ticks spanned and the process's CPU time in it (ns)."""

    def take_lags(self) -> tuple[array[int], int, int]: ...


class CollectionLookup(Protocol):
    """What the recorder needs of the harness's GC watch: the oldest generation collected
    during a span of this process's clock (None: the collector did not run)."""

    def during(self, start_ns: int, end_ns: int) -> int | None: ...


class GoodputRule(Protocol):
    """What the recorder needs of the scenario's per-request SLOs (``scenario.slo``)."""

    def met_by(self, request_ns: dict[str, float]) -> bool: ...


@dataclass(frozen=True)
class RecordingRules:
    """What one test asks of the recorder beyond its samples, replaced whole as a test's
    plan and SLOs become known: its timeline (``clock``: the window, warm-up, cool-down;
    None: the whole run counts), its per-request SLOs (``goodput``) and reading pace."""

    clock: RunClock | None = None
    goodput: GoodputRule | None = None
    pace: ReadingPace | None = None


class Recorder:
    """Listener of ``token_timings``: one per process. Built whole: ``probe``, this
    process's loop probe (``harness.watch.loop_probe``), its lags join each interval;
    ``collections``, the harness's GC watch, names the stalls a collection caused."""

    def __init__(
        self,
        probe: LagSource | None = None,
        collections: CollectionLookup | None = None,
        rules: RecordingRules = RecordingRules(),
    ) -> None:
        self._interval = MetricSet()
        self._pending: dict[tuple[str, str], list[np.ndarray]] = {}
        self._pending_scalars: dict[tuple[str, str], list[float]] = {}  # one per request
        self._pending_values = 0
        # ended requests, the gaps already taken while they went, whether they count whole
        self._finished: deque[tuple[RequestTimings, int, bool]] = deque()
        self.stopped_wall_ns: int | None = None  # the run's stop: the window's end
        self.tagger = GapTagger()
        self.token_flow = TokenFlow()  # live streams' tokens, for tokens/s per interval
        self.causes = self.tagger.causes  # every process's cause windows (``metrics.causes``)
        self.stalls = self.tagger.stalls  # this process's loop stalls (``metrics.stalls``)
        # this process's requests in flight (sent, not yet recorded): their send, wall ns
        self._sending: dict[str, int] = {}
        self._probe = probe
        self._collections = collections
        self.rules = rules
        warm_up()

    def on_stall(self, start_ns: int, end_ns: int) -> None:
        """A stall window of this process's loop, from its probe."""
        self.stalls.add(start_ns, end_ns)
        lookup = self._collections
        generation = None if lookup is None else lookup.during(start_ns, end_ns)
        self._interval.client.note_stall(start_ns, end_ns, generation)

    def on_prefill(
        self,
        request_id: str,
        start_ns: int,
        end_ns: int | None,
        prompt_tokens: int,
        burst: bool = False,
        **_: Any,
    ) -> None:
        """Listener of ``prefill_window``: a request of this process sent (``end`` None),
        given its first token (``end``: its stamp) or failed before one (``end`` -1)."""
        if end_ns is None:
            self._sending[request_id] = start_ns
            window = CauseWindow(PREFILL, request_id, start_ns, None, float(prompt_tokens), burst)
            self.causes.add(window)
            return
        if end_ns == FAILED_END:
            self.causes.fail(PREFILL, request_id, burst)
            return
        window = CauseWindow(PREFILL, request_id, start_ns, end_ns, float(prompt_tokens), burst)
        self.causes.add(window)

    def count_dropped(self, user_class: str) -> None:
        self._interval.for_group(user_class).counters.dropped_arrivals += 1

    def count_burst(self, user_class: str, due: int, sent: int, late: int) -> None:
        """A scheduled burst's requests: due (its time came), sent, and sent late."""
        counters = self._interval.for_group(user_class).counters
        counters.burst_requests_due += due
        counters.burst_requests_sent += sent
        counters.burst_requests_late += late

    def open_window(self) -> None:
        """A test starts: the window is open until its stop (a web-UI session or a
        cluster runs test after test; a worker is never reset between them)."""
        self.stopped_wall_ns = None

    def close_window(self, stop_wall_ns: int | None = None) -> None:
        """The run stopped (now, or at ``stop_wall_ns``): gaps that arrive later (a
        graceful stop's drain) are outside the window (docs/metrics.md, "The window")."""
        if self.stopped_wall_ns is None:
            self.stopped_wall_ns = time.time_ns() if stop_wall_ns is None else stop_wall_ns

    def window_ns(self) -> tuple[int, int]:
        """The measured window (wall ns): the warm-up's end to the cool-down's start or the
        stop; without a scenario's clock, the whole run to the stop."""
        if (clock := self.rules.clock) is not None:
            return clock.window_ns(self.stopped_wall_ns)
        return 0, NO_END_NS if self.stopped_wall_ns is None else self.stopped_wall_ns

    def record(self, timings: RequestTimings, **_: Any) -> None:
        """A request that ended, whatever its fate: its counts now, its samples at the next
        flush. Its gaps inside the window count whatever its fate; its whole-request
        figures (E2E, request TPOT, ...) only when it succeeded, sent after the warm-up and
        ended before the cool-down."""
        timings.refuse_out_of_range()  # a locustfile's own timings too: nothing past int64
        self._sending.pop(timings.request_id, None)
        taken = self.token_flow.finished(timings.request_id)  # gaps reported while it went
        group = metric_group(timings.user_class, timings.model)
        counters = self._interval.for_group(group).counters
        send_wall = timings.t_send_ns
        whole = False
        if not timings.ok:
            self._count_ended_early(counters, timings, send_wall)
        else:
            last_wall = timings.token_stamps[-1]
            clock = self.rules.clock
            excluded = clock.excluded(send_wall, last_wall) if clock is not None else None
            if excluded == "warmup":
                counters.excluded_warmup += 1
            elif excluded == "cooldown":
                counters.excluded_cooldown += 1
            else:
                whole = True
                self._count_whole(counters, timings, send_wall, last_wall)
        if timings.token_stamps or timings.read_delays_ns:
            # The samples are computed later, in flush(), a request at a time with a yield
            # in between: done here, at the end of each request, they blocked the event
            # loop for ~0.3 ms per request and stretched other streams' gaps
            # (benchmarks/README.md).
            self._finished.append((timings, taken, whole))

    def _count_whole(
        self, counters: ClassCounters, timings: RequestTimings, send_wall: int, last_wall: int
    ) -> None:
        """A successful request inside the window: its whole-request counts."""
        counters.ok += 1
        counters.retransmitting_requests += timings.retransmits > 0
        counters.departed_from_tap += timings.departed
        counters.read_in_batches += timings.read_in_batches
        counters.bodies_after_end += timings.body_after_end
        asked = timings.max_tokens
        counters.over_max_tokens += bool(asked and timings.ok and timings.output_tokens > asked)
        if timings.arrival_clock in ARRIVAL_CLOCKS:
            clock_counter = ARRIVAL_CLOCK_COUNTERS[timings.arrival_clock]
            setattr(counters, clock_counter, getattr(counters, clock_counter) + 1)
        count_tokens(counters, timings)
        if not counters.first_send_wall_ns or send_wall < counters.first_send_wall_ns:
            counters.first_send_wall_ns = send_wall
        # the throughput's span ends with the window (a drain's tokens are not in it)
        last_inside = min(last_wall, self.window_ns()[1])
        counters.last_token_wall_ns = max(counters.last_token_wall_ns, last_inside)

    def _count_ended_early(
        self, counters: ClassCounters, timings: RequestTimings, send_wall: int
    ) -> None:
        """A request that failed or that the stop interrupted: its category, and where a
        stream was cut (its gaps before the cut count; its E2E is at least its elapsed
        time; a first token still awaited, or a stall past the idle timeout, is a lower
        bound: ``metrics.md``, "The window")."""
        category = timings.error_category or "unknown"
        if category == INTERRUPTED:
            counters.interrupted += 1
            if len(counters.interrupted_ids) < MAX_INTERRUPTED_IDS:
                counters.interrupted_ids.append(timings.request_id)
        else:
            counters.failed += 1
            counters.errors[category] += 1
            counters.partial_tokens += sum(timings.token_counts)
        elapsed = max(timings.t_end_ns - timings.t_send_ns, 0)
        if not timings.token_stamps:
            start, end = self.window_ns()
            if category == INTERRUPTED and start <= send_wall <= end:
                counters.waiting_at_stop += 1  # its TTFT is at least its wait
                counters.waiting_ns_max = max(counters.waiting_ns_max, elapsed)
            return
        where = CUT_WHERE.get(category, "cut_by_error")
        setattr(counters, where, getattr(counters, where) + 1)
        counters.cut_elapsed_ns_max = max(counters.cut_elapsed_ns_max, elapsed)
        if category in (TIMEOUT_IDLE, TIMEOUT_TOTAL):  # the stall that cut it: censored
            counters.censored_gaps += 1
            stalled = max(timings.t_end_ns - timings.token_stamps[-1], 0)
            counters.censored_gap_ns_max = max(counters.censored_gap_ns_max, stalled)

    def _samples(self, timings: RequestTimings, taken: int, whole: bool) -> None:
        """Every histogram sample of one ended request, buffered for bucketing: its gaps
        inside the window from ``taken`` on (those before went while it streamed), and,
        ``whole``, its whole-request figures, else its TTFT where it was sent inside the
        window.

        The stamps become one array once, and scalars are buffered as Python numbers: at
        tens of thousands of events/s, per-request numpy calls were most of this work."""
        group = metric_group(timings.user_class, timings.model)  # its figures' key
        if timings.read_delays_ns:
            self._add_pending(group, catalogue.READ_DELAY.name, to_us(timings.read_delays_ns))
        if not timings.token_stamps:
            return
        stamps = np.array(timings.token_stamps, dtype=np.int64)  # a copy: never pins the array
        itl = stamps[1:] - stamps[:-1]
        scalars = self._whole_scalars(group, timings, stamps, itl) if whole else {}
        if not whole:
            start, end = self.window_ns()
            if start <= timings.t_send_ns <= end:
                scalars = first_token_scalars(timings)
        for name, value in scalars.items():
            self._pending_scalars.setdefault((group, name), []).append(value)
        recovered = timings.stamps_recovered
        counts = timings.tokens_per_event()
        self._hold(
            group,
            timings.request_id,
            timings.t_send_ns,
            taken,
            scalars,
            stamps[taken:],
            None if counts is None else counts[taken + 1 :],
            None if recovered else read_together(itl[taken:]),
            network=timings.retransmits > 0,
            recovered=recovered,
            first_tokens=timings.token_counts[0] if taken == 0 else 0,
            answer_stamp_ns=timings.answer_stamp_ns,
        )

    def _whole_scalars(
        self, group: str, timings: RequestTimings, stamps: np.ndarray, itl: np.ndarray
    ) -> dict[str, float]:
        """A successful request's one-sample figures, its pace and goodput counted."""
        scalars = whole_scalars(timings, itl)
        counters = self._interval.for_group(group).counters
        rules = self.rules
        if rules.pace is not None:
            tokens, late, stall_ns = token_deadlines(
                rules.pace, timings.t_send_ns, stamps, timings.tokens_per_event()
            )
            counters.paced_tokens += tokens
            counters.late_tokens += late
            counters.late_requests += late > 0
            scalars[catalogue.STALL_TIME.name] = stall_ns
        if rules.goodput is not None and rules.goodput.met_by(scalars):
            counters.good += 1
        return scalars

    def _hold_live(self, live: LiveGaps) -> None:
        """A live stream's gaps taken at a tick (``token_flow``), held like an ended one's."""
        together = None
        if not live.recovered:
            together = read_together(np.diff(live.stamps), live.shared_next)
        counts = live.counts if (live.counts != 1).any() else None
        self._hold(
            live.group,
            live.request_id,
            live.t_send_ns,
            live.first_gap,
            {},
            live.stamps,
            counts,
            together,
            live.network,
            live.recovered,
            live.first_tokens,
            live.answer_stamp_ns,
        )

    def _hold(
        self,
        group: str,
        request_id: str,
        t_send_ns: int,
        first_gap: int,
        scalars: dict[str, float],
        stamps: np.ndarray,
        counts: np.ndarray | None,
        read_together: np.ndarray | None,
        network: bool,
        recovered: bool,
        first_tokens: int,
        answer_stamp_ns: int | None,
    ) -> None:
        """The gaps between ``stamps`` (their tokens: ``counts``, one per stamp after the
        first; None: one each) that end inside the window, counted and held for tagging;
        ``first_tokens``: the tokens of ``stamps[0]`` when it is its stream's first event;
        events before ``answer_stamp_ns`` (all, when None) are its reasoning."""
        starts, ends = stamps[:-1], stamps[1:]
        itl = stamps[1:] - stamps[:-1]
        tokens = None if counts is None else counts[: itl.size]
        start, end = self.window_ns()
        counters = self._interval.for_group(group).counters
        answer_from = NO_END_NS if answer_stamp_ns is None else answer_stamp_ns
        if first_tokens and start <= stamps[0] <= end:
            counters.window_tokens += first_tokens
            counters.window_reasoning_tokens += first_tokens * int(stamps[0] < answer_from)
        inside = (ends >= start) & (ends <= end)
        reasoning = stamps[1:] < answer_from  # the events each gap ends at
        if not inside.all():
            counters.gaps_after_window += int(np.count_nonzero(ends > end))
            starts, ends, itl = starts[inside], ends[inside], itl[inside]
            tokens = None if tokens is None else tokens[inside]
            read_together = None if read_together is None else read_together[inside]
            reasoning = reasoning[inside]
        if itl.size:
            counters.window_gaps += itl.size
            counters.window_tokens += itl.size if tokens is None else int(tokens.sum())
            if reasoning.any():
                counters.window_reasoning_tokens += (
                    int(np.count_nonzero(reasoning))
                    if tokens is None
                    else int(tokens[reasoning].sum())
                )
            counters.first_gap_wall_ns = min(
                counters.first_gap_wall_ns or NO_END_NS, int(starts[0])
            )
            counters.last_token_wall_ns = max(counters.last_token_wall_ns, int(ends[-1]))
            if read_together is not None and not recovered:
                shared = itl == 0
                counters.shared_stamp_events += int(np.count_nonzero(shared))
                counters.multi_event_reads += int(shared[0]) + int(
                    np.count_nonzero(shared[1:] & ~shared[:-1])
                )
        samples = gap_samples_us(itl, tokens)
        for name, values in samples.items():
            self._add_pending(group, name, values)
        if not itl.size and not scalars:
            return
        self.tagger.hold(
            HeldGaps(
                user_class=group,  # the figures' key
                request_id=request_id,
                release_wall_ns=HeldGaps.release_at(),
                send_wall_ns=t_send_ns,
                scalars=scalars,
                starts_wall=starts,
                ends_wall=ends,
                itl_ns=itl,
                counts=tokens,
                samples=samples,
                read_together=read_together,
                network=network,
                recovered=recovered,
                first_gap=first_gap,
            )
        )

    def _in_flight_sends(self) -> list[int]:
        """The wall send times of this process's requests not yet held for tagging."""
        sends = list(self._sending.values())
        if self._finished:
            sends.append(min(t.t_send_ns for t, _, _ in self._finished))
        return sends

    def add_samples(self, group: str, metric: str, values_us: np.ndarray) -> None:
        """Samples of ``metric`` into the interval (bucketed in bulk, ``_bucket``)."""
        self._add_pending(group, metric, values_us)

    def _add_tagged(self, tagged: TaggedSamples) -> None:
        """A tagging step's samples, scalars and tail gaps (``gap_tagging``)."""
        for group, metric, values_us in tagged.samples:
            self._add_pending(group, metric, values_us)
        for group, metric, value_ns in tagged.scalars:
            self._pending_scalars.setdefault((group, metric), []).append(value_ns)
        for group, gaps in tagged.tail_gaps.items():
            self._interval.for_group(group).add_tail_gaps(gaps)

    def _add_pending(self, group: str, metric: str, values_us: np.ndarray) -> None:
        if values_us.size == 0:
            return
        self._pending.setdefault((group, metric), []).append(values_us)
        self._pending_values += values_us.size
        if self._pending_values >= FLUSH_PENDING_VALUES:
            self._bucket()

    def flush(self) -> None:
        """Compute the samples of finished requests, then bucket them into the interval."""
        self._compute_finished()
        self._bucket()

    def _compute_finished(self) -> None:
        slices = WorkSlices()  # streams get stamped in between
        while self._finished:
            self._samples(*self._finished.popleft())
            slices.after_item()

    def _bucket(self) -> None:
        pending, self._pending, self._pending_values = self._pending, {}, 0
        scalars, self._pending_scalars = self._pending_scalars, {}
        for key, values_ns in scalars.items():
            pending.setdefault(key, []).append(to_us(np.asarray(values_ns, dtype=np.float64)))
        for (group, metric), arrays in pending.items():
            metrics = self._interval.for_group(group)
            values = np.concatenate(arrays)
            for start in range(0, values.size, BUCKET_SLICE):
                let_streams_run()  # let waiting streams be read between slices (~0.3 ms each)
                clamped = record_many(
                    metrics.histogram(metric), values[start : start + BUCKET_SLICE]
                )
                metrics.counters.clamped_values += clamped

    def take_interval(self, final: bool = False) -> MetricSet:
        """The delta since the previous call; ``final`` also tags every held gap."""
        self._compute_finished()
        tokens_by_group, live_gaps = self.token_flow.take()
        for live in live_gaps:  # streams still going: their gaps so far (``token_flow``)
            self._hold_live(live)
        for tagged in self.tagger.tag(final, self._in_flight_sends()):
            self._add_tagged(tagged)
        self._bucket()
        if self._probe is not None:
            self._interval.client.record_lags(*self._probe.take_lags())
        for group, tokens in tokens_by_group.items():
            self._interval.for_group(group).counters.arrived_tokens += tokens
        finished, self._interval = self._interval, MetricSet()
        return finished

    def reset(self) -> None:
        self.stopped_wall_ns = None
        self.token_flow.clear()
        self.tagger.clear()
        self._finished.clear()
        self.take_interval()


__all__ = ["PHASES", "PREFILL_AT_GAP", "Recorder", "phase_metric"]
