"""Shared pieces of the benchmarks: a case (streams from the simulator), lag probes,
ground truth; the clients themselves are in ``clients``.

Scripts that stream call ``gevent.monkey.patch_all()`` before importing this module.

A *case* is one simulator process (``tpot_locust.sim``, ground truth on) and this process
streaming from it: N greenlets, each sending requests back to back on its own keep-alive
connection, starting at a random phase within one gap, request lengths drawn around
``tokens`` (+-50 %, seeded). Ours records with ``stream_request`` + ``Recorder`` (the path
``ChatUser`` takes: ``clients.OursClient``); the straightforward client is
``baseline_client.BaselineClient``.
Both ship a delta every second as a worker does (``take_interval`` + ``encode``), so their
CPU includes that. Two probes run alongside: ``HubLagProbe`` (a greenlet sleeping 1 ms,
its lateness) and ``IOLagProbe`` (how long data written to a pipe by another process waits
for its greenlet: the delay a stamp suffers). By default the client is pinned to one core
and the simulator and the pipe writer to the others (``set_pinning``).

Measured and true TPOT are compared as distributions over the same requests, both as
HdrHistograms in whole microseconds (same buckets); the truth is the simulator's send stamp
of each token event (``send_ns - perf_offset_ns`` is on this machine's ``perf_counter_ns``,
put on the client's stamp clock by ``from_perf_ns``).
"""

from __future__ import annotations

import bisect
import gc
import random
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import gevent
import numpy as np
from baseline_client import Sent
from clients import Client, chat_request, make_client
from hdrh.histogram import HdrHistogram
from probes import HubLagProbe, IOLagProbe, pin_other, sched_s

from tpot_locust.common.clock import from_perf_ns, stamp_ns
from tpot_locust.common.timings import to_us
from tpot_locust.metrics.histograms import count_below, histogram_stats, new_histogram, record_many
from tpot_locust.sim.process import start_simulator
from tpot_locust.sim.truth import read_truth
from tpot_locust.wire.http_client import HTTPConnection, Origin

COALESCED_US = 100  # a gap below 0.1 ms: two events that arrived (or were sent) together
PERCENTILES = (50.0, 99.0, 99.9)
REPORT_INTERVAL_S = 1.0
# ``--server engine``: the simulator's engine mode with a fixed step time (the h200 profile
# with every cost but ``step_base_ms`` zeroed, no jitter, no stalls): every stream gets its
# token in the same step, as from a real batching server (benchmarks/sim_engine.py: one
# core writes ~65-75k token events/s that way).
ENGINE_ZEROED = (
    "decode_ms_per_seq",
    "kv_read_ms_per_ktoken",
    "prefill_ms_per_token",
    "prefill_attn_ms_per_mpair",
    "step_jitter",
    "stall_prob",
    "frontend_ms",
)
SIM_SATURATED_CPU = 0.85  # simulator on a CPU or runnable this share of the time: it limits


@dataclass
class ClientRun:
    mode: str
    streams: int
    sent: list[Sent]
    tpot: HdrHistogram
    hub_lag_ns: np.ndarray
    io_lag_ns: np.ndarray
    cpu_s: float
    wall_s: float
    wait_s: float  # runnable but not running (other processes had the cores)
    window_s: float = 0.0  # the sending window: requests start until then
    read_delays: HdrHistogram | None = None  # the client's own read-delay metric, if any

    @property
    def events_in_window(self) -> int:
        return sum(s.events_in_window for s in self.sent)

    @property
    def ok(self) -> list[Sent]:
        return [s for s in self.sent if s.ok]

    @property
    def events(self) -> int:
        return sum(s.events for s in self.sent)


def run_streams(
    client: Client,
    url: str | None,
    *,
    streams: int,
    tokens: int,
    duration_s: float,
    gap_ms: float,
    new_connection: bool = False,
    fixed_length: bool = False,
    seed: int = 1,
) -> ClientRun:
    """``streams`` greenlets send requests back to back until ``duration_s`` has passed (each
    finishes its request in flight). ``streams`` 0: the lag probes alone (idle floor).

    Request lengths are drawn uniformly from ``tokens`` +-50 % (seeded per stream, so both
    clients get the same sequence), so that streams do not all end their requests at the
    same moment; ``fixed_length`` makes every request ``tokens`` long."""
    rng = random.Random(seed)
    sent: list[Sent] = []
    origin = Origin.parse(url) if url else None
    start_ns = stamp_ns()
    stop_ns = start_ns + int(duration_s * 1e9)
    stop_at = stop_ns / 1e9
    running = True

    def one_stream(index: int, phase_s: float) -> None:
        assert origin is not None
        gevent.sleep(phase_s)
        connection = HTTPConnection(origin, clock=client.clock)
        lengths = random.Random(seed * 1_000_003 + index)
        number = 0
        while time.perf_counter() < stop_at:
            if new_connection:
                connection = HTTPConnection(origin, clock=client.clock)
            length = tokens if fixed_length else lengths.randint(tokens // 2, tokens * 3 // 2)
            request = chat_request(f"{client.name}-{streams}-{index}-{number}", max(length, 2))
            t_call_ns = stamp_ns()
            result = client.request(connection, request)
            in_window = 0 if result.stamps is None else bisect.bisect_right(result.stamps, stop_ns)
            sent.append(
                result._replace(
                    t_call_ns=t_call_ns, sequence=number, stamps=None, events_in_window=in_window
                )
            )
            if new_connection:
                connection.close()
            number += 1
        connection.close()

    def reporter() -> None:
        while running:
            gevent.sleep(REPORT_INTERVAL_S)
            client.report()

    gc.collect()  # as a worker does at test start (quiet_loop.collect_garbage_now)
    gc.freeze()
    probe, io_probe = HubLagProbe(), IOLagProbe()
    io_probe.start()
    wait0 = sched_s()[1]
    cpu0, wall0 = time.process_time(), time.perf_counter()
    probe.start()
    report_greenlet = gevent.spawn(reporter)
    if streams:
        phases = [rng.uniform(0, gap_ms / 1000) for _ in range(streams)]
        gevent.joinall([gevent.spawn(one_stream, i, phases[i]) for i in range(streams)])
    else:
        gevent.sleep(duration_s)
    running = False
    report_greenlet.kill()
    lags, io_lags = probe.stop(), io_probe.stop()  # before the final report's long block
    client.report(final=True)
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    wait = sched_s()[1] - wait0
    return ClientRun(
        client.name,
        streams,
        sent,
        client.tpot(),
        lags,
        io_lags,
        cpu,
        wall,
        wait,
        window_s=duration_s,
        read_delays=client.read_delays(),
    )


@dataclass
class TruthRecord:
    send_ns: np.ndarray  # each token event's write (the client's stamp clock)
    arrival_ns: int  # when the server had the request

    @property
    def ttft_ns(self) -> int:
        return int(self.send_ns[0]) - self.arrival_ns if self.send_ns.size else 0


def load_truth(path: Path) -> dict[str, TruthRecord]:
    truth = {}
    for record in read_truth(path):
        if record.get("aborted") or not record.get("send_ns"):  # (engine step lines too)
            continue
        offset = from_perf_ns(0) - record["perf_offset_ns"]  # the server's wall to our clock
        truth[record["request_id"]] = TruthRecord(
            np.asarray(record["send_ns"], dtype=np.int64) + offset, record["arrival_ns"] + offset
        )
    return truth


@dataclass
class Case:
    """One case's figures: everything the tables print."""

    mode: str
    gap_ms: float
    streams: int
    tokens: int
    run: ClientRun
    true_tpot: HdrHistogram = field(default_factory=new_histogram)
    true_events: int = 0
    ttft_measured_ns: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    ttft_true_ns: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    # our first token stamp - the server's write of that token: the response side of the
    # TTFT overhead (the rest, t_send -> the server's parse, is the request side)
    first_stamp_late_ns: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    connect_ns: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    sequence: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # per stream
    sim_cpu_s: float = 0.0
    sim_wait_s: float = 0.0
    unmatched: int = 0  # ok requests with no truth line, or with a different event count

    @property
    def events_per_s(self) -> float:
        """Token events that arrived within the sending window, per second of it (the tail
        of the last requests, with fewer streams, is left out)."""
        return self.run.events_in_window / self.run.window_s if self.run.window_s else 0.0

    @property
    def cpu_percent(self) -> float:
        return 100 * self.run.cpu_s / self.run.wall_s if self.run.wall_s else 0.0

    @property
    def cpu_us_per_event(self) -> float:
        return self.run.cpu_s / self.run.events * 1e6 if self.run.events else float("nan")

    @property
    def wait_percent(self) -> float:
        return 100 * self.run.wait_s / self.run.wall_s if self.run.wall_s else 0.0

    @property
    def sim_cpu_share(self) -> float:
        return self.sim_cpu_s / self.run.wall_s if self.run.wall_s else 0.0

    @property
    def sim_busy_share(self) -> float:
        """Simulator on a CPU or waiting for one: near 1, it could not go faster."""
        return (self.sim_cpu_s + self.sim_wait_s) / self.run.wall_s if self.run.wall_s else 0.0

    @property
    def sim_bound(self) -> bool:
        return self.sim_busy_share >= SIM_SATURATED_CPU

    @property
    def sim_cell(self) -> str:
        cell = f"{100 * self.sim_cpu_share:.0f}+{100 * self.sim_wait_share:.0f}%"
        return cell + (" S" if self.sim_bound else "")

    @property
    def sim_wait_share(self) -> float:
        return self.sim_wait_s / self.run.wall_s if self.run.wall_s else 0.0

    def percentiles_ms(self, histogram: HdrHistogram) -> dict[float, float]:
        stats = histogram_stats(histogram, PERCENTILES)
        return {p: stats.percentiles[p] / 1000 for p in PERCENTILES}

    @property
    def measured_ms(self) -> dict[float, float]:
        return self.percentiles_ms(self.run.tpot)

    @property
    def true_ms(self) -> dict[float, float]:
        return self.percentiles_ms(self.true_tpot)

    @property
    def error_ms(self) -> dict[float, float]:
        measured, true = self.measured_ms, self.true_ms
        return {p: measured[p] - true[p] for p in PERCENTILES}

    @property
    def coalesced(self) -> float:
        return _coalesced(self.run.tpot)

    @property
    def true_coalesced(self) -> float:
        return _coalesced(self.true_tpot)

    @property
    def hub_lag_p99_ms(self) -> float:
        lags = self.run.hub_lag_ns
        return float(np.percentile(lags, 99)) / 1e6 if lags.size else float("nan")

    @property
    def io_lag_p99_ms(self) -> float:
        lags = self.run.io_lag_ns
        return float(np.percentile(lags, 99)) / 1e6 if lags.size else float("nan")

    @property
    def read_delay_p99_ms(self) -> float | None:
        histogram = self.run.read_delays
        return None if histogram is None else self.percentiles_ms(histogram)[99.0]

    @property
    def lag_cell(self) -> str:
        return f"{self.hub_lag_p99_ms:.3f} / {self.io_lag_p99_ms:.3f}"

    def net_us_per_event(self, idle: Case | None) -> float:
        """CPU us per token event less the probes' own CPU (the idle case's share)."""
        if not self.run.events:
            return float("nan")
        floor = idle.run.cpu_s / idle.run.wall_s if idle and idle.run.wall_s else 0.0
        return max(self.run.cpu_s - floor * self.run.wall_s, 0.0) / self.run.events * 1e6

    @property
    def ttft_overhead_ns(self) -> np.ndarray:
        return self.ttft_measured_ns - self.ttft_true_ns


def _coalesced(histogram: HdrHistogram) -> float:
    total = histogram.total_count
    return count_below(histogram, COALESCED_US) / total if total else float("nan")


def evaluate(case: Case, truth: dict[str, TruthRecord]) -> Case:
    """Fill in the truth side from the simulator's records of the client's ok requests."""
    gaps: list[np.ndarray] = []
    measured_ttft: list[int] = []
    true_ttft: list[int] = []
    first_late: list[int] = []
    connect: list[int] = []
    sequence: list[int] = []
    for sent in case.run.ok:
        record = truth.get(sent.request_id)
        if record is None or record.send_ns.size != sent.events:
            case.unmatched += 1
            continue
        gaps.append(np.diff(record.send_ns))
        case.true_events += record.send_ns.size
        assert sent.first_ns is not None
        measured_ttft.append(sent.first_ns - sent.t_send_ns)
        true_ttft.append(record.ttft_ns)
        first_late.append(sent.first_ns - int(record.send_ns[0]))
        connect.append(sent.t_send_ns - sent.t_call_ns)
        sequence.append(sent.sequence)
    if gaps:
        record_many(case.true_tpot, to_us(np.concatenate(gaps)))
    case.ttft_measured_ns = np.asarray(measured_ttft, dtype=np.int64)
    case.ttft_true_ns = np.asarray(true_ttft, dtype=np.int64)
    case.first_stamp_late_ns = np.asarray(first_late, dtype=np.int64)
    case.connect_ns = np.asarray(connect, dtype=np.int64)
    case.sequence = np.asarray(sequence, dtype=np.int64)
    return case


def run_case(
    *,
    gap_ms: float,
    streams: int,
    tokens: int,
    duration_s: float,
    mode: str = "ours",
    ttft_ms: float = 5.0,
    new_connection: bool = False,
    server: str = "independent",
    fixed_length: bool = False,
) -> Case:
    """Start a simulator with ground truth, stream from it, compare; streams 0: idle probe.

    ``server`` ``independent``: each stream on its own timer (``--gap-ms``, ``--ttft-ms``);
    ``engine``: one fixed step of ``gap_ms`` for all streams (TTFT is one step)."""
    client = make_client(mode)
    if streams == 0:
        run = run_streams(
            client, None, streams=0, tokens=tokens, duration_s=duration_s, gap_ms=gap_ms
        )
        return Case(mode, gap_ms, 0, tokens, run)
    with tempfile.TemporaryDirectory(prefix="tpot-bench-") as folder:
        truth_path = Path(folder) / "truth.jsonl"
        if server == "engine":
            args = [
                "--profile",
                "h200-llama3-8b",
                "--set",
                f"step_base_ms={gap_ms:g}",
                "--steps",
                str(Path(folder) / "steps.jsonl"),
            ]
            for key in ENGINE_ZEROED:
                args += ["--set", f"{key}=0"]
        else:
            args = ["--gap-ms", f"{gap_ms:g}", "--ttft-ms", f"{ttft_ms:g}"]
        args += ["--seed", "1"]
        with start_simulator(*args, truth=truth_path) as sim:
            pin_other(sim.process.pid)
            sim0 = sched_s(sim.process.pid)
            run = run_streams(
                client,
                sim.url,
                streams=streams,
                tokens=tokens,
                duration_s=duration_s,
                gap_ms=gap_ms,
                new_connection=new_connection,
                fixed_length=fixed_length,
            )
            sim1 = sched_s(sim.process.pid)
        truth = load_truth(truth_path)
    case = Case(
        mode,
        gap_ms,
        streams,
        tokens,
        run,
        sim_cpu_s=sim1[0] - sim0[0],
        sim_wait_s=sim1[1] - sim0[1],
    )
    return evaluate(case, truth)
