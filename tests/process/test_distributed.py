"""Real master + workers: exact merge, nothing lost at shutdown, dead workers named."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
from hdrh.log import HistogramLogReader

from tests.helpers.distributed import assert_window_truth, start_cluster, window_truth_gaps
from tpot_locust.metrics.histograms import histogram_stats, new_histogram
from tpot_locust.metrics.metric_set import MetricSet
from tpot_locust.report.attribution import worker_shares
from tpot_locust.report.histograms_file import load_results
from tpot_locust.sim.process import start_simulator


def wait_for_intervals(hlog: Path, count: int, timeout_s: float = 60) -> None:
    """Until the master has merged ``count`` intervals with data (a slow machine starts late)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if hlog.exists():
            lines = [line for line in hlog.read_text().splitlines() if line[:1].isdigit()]
            if len(lines) >= count:
                return
        time.sleep(0.2)
    raise AssertionError(f"no {count} intervals in {hlog}")


def finished_truth(path: Path) -> list[dict]:
    entries = [json.loads(line) for line in path.read_text().splitlines()]
    return [e for e in entries if not e.get("aborted")]


def worker_audits(out: Path) -> list[MetricSet]:
    return [
        MetricSet.decode(json.loads(p.read_text())["classes"])
        for p in sorted((out / "workers").glob("*.json"))
    ]


def check_exact_merge(out: Path, truth_path: Path, workers: int, streams: int = 4) -> dict:
    summary = json.loads((out / "summary.json").read_text())
    totals, _ = load_results(out)
    merged = totals.combined().histogram("tpot")
    audits = worker_audits(out)
    assert len(audits) == workers
    per_worker = [a.combined().histogram("tpot").total_count for a in audits]
    assert all(count > 0 for count in per_worker), per_worker
    assert merged.total_count == sum(per_worker) == summary["metrics"]["tpot"]["count"]
    # ground truth: every gap of every request (finished or cut by the stop) inside each
    # worker's window (docs/metrics.md, "The window"); the stop can kill a client after the
    # server sent its last token (counted interrupted)
    interrupted = {i for a in audits for i in a.combined().counters.interrupted_ids}
    assert len(interrupted) == summary["requests"]["interrupted"]
    truth = [e for e in finished_truth(truth_path) if e["request_id"] not in interrupted]
    assert summary["requests"]["ok"] == len(truth)
    every = [json.loads(line) for line in truth_path.read_text().splitlines()]
    for path, audit in zip(sorted((out / "workers").glob("*.json")), audits, strict=True):
        saved = json.loads(path.read_text())
        prefix = saved["client_stalls"]["request_id_prefix"]
        expected = window_truth_gaps(every, saved["window_wall_ns"], prefix)
        assert_window_truth(audit.combined().histogram("tpot").total_count, expected, streams)
    # merged percentiles equal those of one histogram built from all measured values
    one = new_histogram()
    for audit in audits:
        one.add(audit.combined().histogram("tpot"))
    assert histogram_stats(one) == histogram_stats(merged)
    # the client's own read delays merge the same way
    delays = [a.combined().histogram("read_delay").total_count for a in audits]
    assert min(delays) > 0 and sum(delays) == summary["metrics"]["read_delay"]["count"]
    assert summary["complete"] is True
    assert summary["workers"]["reported_in_full"] == workers
    # and each worker's own read delay, judged apart from the others
    per_worker_delay = summary["workers"]["read_delay_p99_ms"]
    assert len(per_worker_delay) == workers and all(v >= 0 for v in per_worker_delay.values())
    check_own_figures(out, summary)
    return summary


def check_own_figures(out: Path, summary: dict) -> None:
    """Each worker's own figures (the row it made) are those of everything it sent (its
    audit), as the master made them from its deltas before: read delays and attribution
    (its loop health also counts its idle reports before the test: not compared)."""
    workers = summary["workers"]
    names = {client_id: name for name, client_id in workers["ids"].items()}
    for path in sorted((out / "workers").glob("*.json")):
        saved = json.loads(path.read_text())
        name, sent = names[saved["client_id"]], MetricSet.decode(saved).combined()
        assert workers["attribution"][name] == worker_shares(sent), name
        delays = histogram_stats(sent.histograms["read_delay"], (90.0, 99.0)).percentiles
        assert workers["read_delay_p90_ms"][name] == delays[90.0] / 1000, name
        assert workers["read_delay_p99_ms"][name] == delays[99.0] / 1000, name


def test_two_workers_merge_exactly(tmp_path: Path) -> None:
    truth_path, out = tmp_path / "truth.jsonl", tmp_path / "out"
    with start_simulator("--gap-ms", "2", "--ttft-ms", "5", truth=truth_path) as sim:
        cluster = start_cluster(sim.url, out, workers=2, users=4, run_time="4s")
        code, output = cluster.wait(timeout=120)
    assert code == 0, output[-3000:]
    summary = check_exact_merge(out, truth_path, workers=2)
    assert "workers: 2 of 2 reported in full" in output
    # the time series and the interval logs cover the run
    assert len(summary["timeseries"]) >= 3
    assert (
        sum(p["tpot"]["count"] for p in summary["timeseries"])
        == summary["metrics"]["tpot"]["count"]
    )
    reader = HistogramLogReader(str(out / "histograms" / "tpot.hlog"), new_histogram())
    total = 0
    while (interval := reader.get_next_interval_histogram()) is not None:
        total += interval.total_count
    assert total == summary["metrics"]["tpot"]["count"]


def test_workers_slow_to_stop_lose_nothing(tmp_path: Path) -> None:
    # ~1.2 s requests: every user is mid-stream at the stop and finishes within --stop-timeout
    truth_path, out = tmp_path / "truth.jsonl", tmp_path / "out"
    with start_simulator("--gap-ms", "2", "--ttft-ms", "5", truth=truth_path) as sim:
        cluster = start_cluster(
            sim.url, out, 2, 4, "3s", "--stop-timeout", "3", env={"TPOT_TEST_OUTPUT_TOKENS": "600"}
        )
        code, output = cluster.wait(timeout=120)
    assert code == 0, output[-3000:]
    summary = check_exact_merge(out, truth_path, workers=2)
    assert summary["requests"]["ok"] >= 4


def test_a_worker_with_other_settings_stops_the_run_named(tmp_path: Path) -> None:
    """A worker whose locustfile made its class otherwise (another file on that machine)
    would skew the merged figures: each test's plan carries the master's settings digest,
    and such a worker stops the run at its start, naming the class."""
    out = tmp_path / "out"
    with start_simulator("--gap-ms", "2", "--ttft-ms", "5") as sim:
        started = time.monotonic()
        cluster = start_cluster(
            sim.url, out, 2, 4, "30s", worker_env={"TPOT_TEST_OUTPUT_TOKENS": "600"}
        )
        code, output = cluster.wait(timeout=120)
    assert time.monotonic() - started < 25, output[-3000:]  # stopped, not run out
    assert "its Stream settings differ from the master's" in output, output[-3000:]
    assert code != 0, output[-3000:]


def test_dead_worker_is_named_and_run_marked_incomplete(tmp_path: Path) -> None:
    truth_path, out = tmp_path / "truth.jsonl", tmp_path / "out"
    with start_simulator("--gap-ms", "2", "--ttft-ms", "5", truth=truth_path) as sim:
        cluster = start_cluster(sim.url, out, 2, 4, "10s")
        wait_for_intervals(out / "histograms" / "tpot.hlog", 3)
        time.sleep(1.5)  # both workers have reported with data a few times
        cluster.workers[0].kill()
        code, output = cluster.wait(timeout=120)
    summary = json.loads((out / "summary.json").read_text())
    assert code == 1, output[-3000:]
    assert summary["complete"] is False
    assert len(summary["workers"]["missing"]) == 1
    missing = summary["workers"]["missing"][0]
    assert f"INCOMPLETE RUN: no final report from worker(s) {missing}" in output
    # what the dead worker delivered before dying stays in the totals
    (survivor,) = worker_audits(out)
    survivor_count = survivor.combined().histogram("tpot").total_count
    assert summary["metrics"]["tpot"]["count"] > survivor_count > 0
    assert np.isfinite(summary["metrics"]["tpot"]["p99"])
