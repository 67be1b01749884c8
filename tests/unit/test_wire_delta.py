"""Issue 45, item 3: a worker's delta in the wire form (``metrics.wire_delta``) merges on the
master exactly as the HdrHistogram V2 form did, bucket for bucket, counter for counter."""

from __future__ import annotations

from array import array
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import msgpack
import numpy as np
import pytest
from hdrh.histogram import HdrHistogram

from tpot_locust.common.clock import stamp_ns
from tpot_locust.common.cooperation import WorkSlices
from tpot_locust.common.results_folder import ResultsFolder
from tpot_locust.common.timings import RequestTimings
from tpot_locust.harness.run.distributed import MasterLink
from tpot_locust.harness.run.worker_deltas import pack_delta, unpack_delta, unpack_row
from tpot_locust.metrics.collector import Collector
from tpot_locust.metrics.histogram_names import CAUSE_METRICS
from tpot_locust.metrics.histograms import (
    HIGHEST_US,
    add_into,
    counts_length,
    counts_view,
    decode_histogram,
    histogram_stats,
    new_histogram,
    record_many,
)
from tpot_locust.metrics.metric_set import ClassMetrics, MetricSet
from tpot_locust.metrics.recorder import Recorder
from tpot_locust.metrics.span_counts import pack_spans, unpack_spans
from tpot_locust.metrics.stalls import ClientHealth
from tpot_locust.metrics.wire_delta import decode_delta, encode_delta
from tpot_locust.metrics.worker_figures import WorkerFigures
from tpot_locust.report.attribution import worker_shares
from tpot_locust.report.worker_rows import LatestRows, worker_row

CLASSES = ("chat", "arrivals", "chat@model-b")


def timings(rng: np.random.Generator, index: int, tokens: int, user_class: str) -> RequestTimings:
    """A finished request whose gaps spread wide (log-normal, a few far outliers)."""
    gaps = rng.lognormal(np.log(5e6), 0.8, tokens - 1).astype(np.int64)
    gaps[rng.random(tokens - 1) < 0.01] *= 200
    t_send = stamp_ns() - int(gaps.sum()) - 30_000_000
    stamps = (t_send + 25_000_000 + np.concatenate(([0], np.cumsum(gaps)))).tolist()
    request = RequestTimings(
        user_class=user_class,
        api="chat",
        request_id=f"r{index}",
        t_intended_ns=t_send,
        t_send_ns=t_send,
        token_stamps=stamps,
        token_counts=[1] * tokens,
        output_tokens=tokens,
        prompt_tokens_requested=256,
        prompt_tokens_reported=250,
        finish_reason="length",
        t_end_ns=stamps[-1],
        scheduled=index % 2 == 0,
    )
    request.read_delays_ns = array("q", rng.integers(0, 5_000_000, tokens // 3).tolist())
    return request


def worker_deltas(count: int, seed: int) -> list[MetricSet]:
    """``count`` real deltas of one worker, with loop lags, stalls and sparse counters."""
    rng = np.random.default_rng(seed)
    recorder = Recorder()
    deltas = []
    for number in range(count):
        for index in range(12):
            user_class = CLASSES[(number + index) % len(CLASSES)]
            recorder.record(timings(rng, number * 100 + index, 40 + 7 * index, user_class))
        delta = recorder.take_interval(final=True)
        lags = rng.integers(0, 3_000_000, 50 + number).tolist()
        cpu_ns = int(rng.integers(0, 10**9))
        delta.client.record_lags(array("q", lags), watched_ns=10**9, cpu_ns=cpu_ns)
        delta.client.note_stall(10**18, 10**18 + int(rng.integers(10**6, 10**8)), number % 3)
        counters = delta.for_group("chat").counters
        counters.errors["timeout"] += number
        counters.interrupted_ids.extend(f"x{number}-{i}" for i in range(number % 4))
        counters.first_send_wall_ns = 0 if number % 2 else 10**18 - number
        counters.prompt_difference_max = int(rng.integers(0, 100))
        deltas.append(delta)
    return deltas


def over_the_wire(delta: MetricSet, row: dict[str, Any] | None = None) -> Any:
    """What the master's ``unpack_delta`` gets: the packed delta through msgpack."""
    packed = msgpack.packb(pack_delta(delta, row))
    return msgpack.unpackb(packed, raw=False, strict_map_key=False)


def old_merge(master: SimpleNamespace, worker: str, delta: MetricSet) -> None:
    """``MasterLink._merge`` as it was for the V2 form (f743db4): the reference."""
    delta.client.name_worker(worker)
    master.client_health.setdefault(worker, ClientHealth()).add(delta.client)
    master.collector.add_delta(delta)
    own = master.causes_by_worker.setdefault(worker, ClassMetrics())
    for metrics in delta.groups.values():
        for name, histogram in metrics.histograms.items():
            if name.split("@", 1)[0] in CAUSE_METRICS:
                add_into(own.histogram(name), histogram)
        if (read_delay := metrics.histograms.get("read_delay")) is not None:
            if worker not in master.read_delays:
                master.read_delays[worker] = new_histogram()
            add_into(master.read_delays[worker], read_delay)


def a_master(folder: Path) -> SimpleNamespace:
    """What ``MasterLink._merge`` fills (and the reference, as it was)."""
    collector = Collector()
    collector.start(ResultsFolder(folder))
    return SimpleNamespace(
        collector=collector,
        rows=LatestRows(),
        client_health={},
        causes_by_worker={},
        read_delays={},
        names=KeptNames(),
    )


class KeptNames:
    """The master's worker names, each worker's id kept as its name (the reference has no
    names: ``worker_names`` is tested on its own)."""

    def __call__(self, client_id: str) -> str:
        return client_id

    def ids(self) -> dict[str, str]:
        return {}


def same_histogram(ours: HdrHistogram, theirs: HdrHistogram, where: str) -> None:
    assert np.array_equal(counts_view(ours), counts_view(theirs)), where
    assert (ours.total_count, ours.min_value, ours.max_value) == (
        theirs.total_count,
        theirs.min_value,
        theirs.max_value,
    ), where


def same_metrics(ours: ClassMetrics, theirs: ClassMetrics, where: str) -> None:
    assert list(ours.histograms) == list(theirs.histograms), where  # the same, in order
    for name, histogram in ours.histograms.items():
        same_histogram(histogram, theirs.histograms[name], f"{where}.{name}")
    assert ours.counters.to_dict() == theirs.counters.to_dict(), where
    assert ours.tail_gaps == theirs.tail_gaps, where


def same_health(ours: ClientHealth, theirs: ClientHealth, where: str) -> None:
    same_histogram(ours.loop_lag, theirs.loop_lag, f"{where}.loop_lag")
    assert {**ours.__dict__, "loop_lag": None} == {**theirs.__dict__, "loop_lag": None}, where


def same_sets(ours: MetricSet, theirs: MetricSet, where: str) -> None:
    assert list(ours.groups) == list(theirs.groups), where
    for group, metrics in ours.groups.items():
        same_metrics(metrics, theirs.groups[group], f"{where}.{group}")
    same_health(ours.client, theirs.client, f"{where}.client")


def log_rows(folder: Path) -> dict[str, list[list[str]]]:
    """Each interval log's rows without their times (the two masters ticked apart)."""
    return {
        path.name: [
            line.split(",")[2:]
            for line in path.read_text().splitlines()
            if not line.startswith(("#", '"'))
        ]
        for path in sorted((folder / "histograms").glob("*.hlog"))
    }


def test_many_workers_deltas_merge_exactly_as_the_v2_form(tmp_path: Path) -> None:
    """Three workers' deltas, merged both ways with ticks in between: totals and each
    interval (time series, interval logs) are identical."""
    workers = {f"w{i}": worker_deltas(9, seed=i) for i in range(3)}
    fast, slow = a_master(tmp_path / "fast"), a_master(tmp_path / "slow")
    for number in range(9):
        for worker, deltas in workers.items():
            MasterLink._merge(
                fast, worker, unpack_delta(worker, over_the_wire(deltas[number])), None
            )
            old_merge(slow, worker, MetricSet.decode(deltas[number].encode()))
        if number % 3 != 1:  # intervals of one and of two reports per worker
            fast.collector.tick(5)
            slow.collector.tick(5)
    same_sets(fast.collector.totals, slow.collector.totals, "totals")
    assert any(metrics.tail_gaps for metrics in fast.collector.totals.groups.values())
    timing = ("t", "interval_s", "tokens_per_s")
    for ours, theirs in zip(fast.collector.timeseries, slow.collector.timeseries, strict=True):
        assert {k: v for k, v in ours.items() if k not in timing} == {
            k: v for k, v in theirs.items() if k not in timing
        }
    fast.collector.close()
    slow.collector.close()
    assert log_rows(tmp_path / "fast") == log_rows(tmp_path / "slow")
    assert any(log_rows(tmp_path / "fast").values())


def old_summary(master: SimpleNamespace) -> dict[str, Any]:
    """``MasterLink.summary``'s per-worker figures as they were (f743db4): the reference."""
    return {
        **{
            f"read_delay_p{p:g}_ms": {
                worker: histogram_stats(histogram, (p,)).percentiles[p] / 1000
                for worker, histogram in sorted(master.read_delays.items())
            }
            for p in (90.0, 99.0)
        },
        "stalls": {worker: h.stalls for worker, h in sorted(master.client_health.items())},
        "loop_lag_max_ms": {
            worker: histogram_stats(h.loop_lag, ()).max / 1000
            for worker, h in sorted(master.client_health.items())
        },
        "loop_held_share": {
            worker: round(h.held_share, 4)
            for worker, h in sorted(master.client_health.items())
            if h.held_share is not None
        },
        "attribution": {
            worker: worker_shares(metrics)
            for worker, metrics in sorted(master.causes_by_worker.items())
        },
    }


@pytest.mark.parametrize("cooperative", [False, True])
def test_each_workers_own_figures_are_as_they_were(tmp_path: Path, cooperative: bool) -> None:
    """The summary's per-worker view (read delays, loop health, attribution) from the rows
    the workers made of what they sent, through msgpack, equals the one the master made
    of every worker's whole histograms (what its spans made since, exactly)."""
    fast, slow = a_master(tmp_path / "fast"), a_master(tmp_path / "slow")
    figures = {f"w{i}": WorkerFigures() for i in range(3)}
    for number, delta in enumerate(worker_deltas(6, seed=9) + worker_deltas(4, seed=11)):
        worker = f"w{number % 3}"
        reference = MetricSet.decode(delta.encode())
        pause = WorkSlices(slice_ns=0).after_item if cooperative else None  # a yield each
        figures[worker].add(delta, pause)
        packed = over_the_wire(delta, worker_row(figures[worker], pause))
        MasterLink._merge(fast, worker, unpack_delta(worker, packed), unpack_row(packed))
        old_merge(slow, worker, reference)
    fast.seen, fast.finals, fast.missing = set(), set(), list
    summary = MasterLink.summary(fast)  # type: ignore[arg-type]
    assert {
        k: v for k, v in summary.items() if k not in ("seen", "reported_in_full", "missing", "ids")
    } == old_summary(slow)
    assert summary["attribution"]["w1"] and summary["read_delay_p99_ms"]["w2"] > 0
    assert summary["loop_held_share"]["w0"] > 0 and summary["stalls"]["w1"] > 0


def test_a_delta_read_back_is_the_delta(tmp_path: Path) -> None:
    for delta in worker_deltas(3, seed=5):
        reference = MetricSet.decode(delta.encode())
        same_sets(decode_delta(encode_delta(delta)).to_metric_set(), reference, "delta")


@pytest.mark.parametrize("largest", [1, 255, 256, 65_535, 65_536, 2**32, 2**47])
def test_every_width_and_both_ends_of_the_layout_read_back_exactly(largest: int) -> None:
    """Counts of each width, in the first and last buckets: the histogram's own counts and
    total, and min and max as ``HdrHistogram.decode`` sets them (its
    ``set_internal_tacking_values``). Not against the V2 blob: hdrhistogram 0.10.8 loses
    a bucket of 2**32 there (the spans do not)."""
    rng = np.random.default_rng(largest)
    histograms = []
    for number in range(4):
        histogram = new_histogram()
        record_many(histogram, rng.integers(0, 20_000 * (number + 1), 500))
        record_many(histogram, np.array([0, HIGHEST_US, 7 * 10**6 * (number + 1)]))
        counts_view(histogram)[rng.integers(0, counts_length())] += largest
        histogram.total_count += largest
        histograms.append((number % 2, f"h{number}", histogram))
    histograms.append((1, "empty", new_histogram()))
    read = unpack_spans(msgpack.unpackb(msgpack.packb(pack_spans(histograms))), owners=2)
    assert [(owner, name) for owner, name, _ in read] == [(o, n) for o, n, _ in histograms[:4]]
    for (_, name, span), (_, _, histogram) in zip(read, histograms, strict=False):
        ours, nonzero = span.to_histogram(), np.flatnonzero(counts_view(histogram))
        assert np.array_equal(counts_view(ours), counts_view(histogram)), name
        assert ours.total_count == histogram.total_count, name
        decoded = new_histogram()
        decoded.set_internal_tacking_values(int(nonzero[0]), int(nonzero[-1]), 0)
        assert (ours.min_value, ours.max_value) == (decoded.min_value, decoded.max_value), name
        if largest < 2**32:
            same_histogram(ours, decode_histogram(histogram.encode()), name)
