"""A Locust cluster on separate hosts under real network faults (issue 29, item 3).

The simulator, the master and each worker run in network namespaces of their own, joined by
veth pairs to a router namespace, on real distinct addresses (``10.252.T.x``: no 127.0.0.1
between them; ``tests/helpers/netns_cluster.py``). Each test makes one fault and checks what
the master reports (workers lost, ``complete``, the exit code) and that nothing is lost or
counted twice: the merged histograms equal the sum of what each worker recorded (its own
``OUT/workers/<id>.json``), and each worker's tokens equal the simulator's truth for its
requests (a worker's request ids start with its process tag, saved in its audit).

- delay and loss between workers and master: netem is not in every kernel, so the delay is a
  userspace relay (``tests/helpers/tcp_relay.py``, 30-70 ms a chunk, in order, both ways) on
  a host of its own, and 1 % of the segments of the master's and the relay's ports are
  dropped by the router (HTB + a BPF filter, ``tests/helpers/netns.py``): the drops are on
  forwarded packets, so every sender's TCP has to find and resend them;
- a worker partitioned from the master for 10 s and back (the router blackholes what goes
  between their addresses: silently, both ways, the simulator still reachable);
- a worker host's processes killed mid-run;
- the server reachable from one worker only (the other's host has no route to it);
- the live ``tpot_locust_workers_missing`` gauge while every worker reports (it counted
  every worker lost until their final reports came, fixed).

Needs root (``ip netns``); skipped, saying why, where namespaces or drops cannot be made.
Every namespace and link made here is deleted afterwards, whatever happened.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.helpers.distributed import assert_window_truth, window_truth_gaps
from tests.helpers.netns import drop_share, in_netns, ip, start_simulator_in_netns
from tests.helpers.netns_cluster import MASTER_PORT, SIM_PORT, Net, build_net
from tests.helpers.tcp_relay import STATS
from tests.process.test_distributed import check_exact_merge, wait_for_intervals
from tpot_locust.metrics.metric_set import MetricSet
from tpot_locust.report.histograms_file import load_results

SIM_ARGS = ("--gap-ms", "2", "--ttft-ms", "10")
USERS = 4  # two per worker
RELAY_PORT = 6000
MASTER_WAIT_S = 150  # a run of <= 20 s, its flush (stop timeout + 10 s) and start-up
METRICS_PORT = 9464
READY = re.compile(r"(\S+) \(index \d+\) reported as ready\. (\d+) workers connected")


@dataclass
class Audit:
    client_id: str
    prefix: str  # every request id this worker sent starts with it
    metrics: MetricSet
    window: list[int]  # its window in token time (wall ns): the gaps it counts

    @property
    def tpot(self) -> int:
        return self.metrics.combined().histogram("tpot").total_count


def audits(out: Path) -> dict[str, Audit]:
    """Each worker's own record of what it measured and sent, by client id."""
    found = {}
    for path in sorted((out / "workers").glob("*.json")):
        saved = json.loads(path.read_text())
        prefix = saved["client_stalls"]["request_id_prefix"]
        found[saved["client_id"]] = Audit(
            saved["client_id"], prefix, MetricSet.decode(saved["classes"]), saved["window_wall_ns"]
        )
    return found


def truth_matches(audit: Audit, truth: list[dict[str, Any]]) -> None:
    """One worker's TPOT count against the simulator's truth of its window: every gap of
    its requests (finished or cut by the stop) sent inside it, but for the closing edge."""
    expected = window_truth_gaps(truth, audit.window, audit.prefix)
    assert_window_truth(audit.tpot, expected, USERS // 2)


def every_truth(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def merged(out: Path) -> tuple[dict[str, Any], int]:
    """The master's summary and its merged TPOT count (from histograms.json)."""
    summary = json.loads((out / "summary.json").read_text())
    totals, _ = load_results(out)
    count = totals.combined().histogram("tpot").total_count
    assert count == summary["metrics"]["tpot"]["count"]
    return summary, count


def logs(net: Net, *names: str) -> str:
    return "\n".join(f"--- {name} ---\n{net.log(name)[-3000:]}" for name in names)


@contextmanager
def cluster(tmp_path: Path, workers: int, *extra_roles: str) -> Iterator[tuple[Net, Path, Path]]:
    """The namespaces (``sim``, ``master``, ``w0``..), the simulator serving on its own
    address in ``sim``; yields the net, the results folder and the truth file."""
    roles = ["sim", "master", *extra_roles, *(f"w{i}" for i in range(workers))]
    truth, out = tmp_path / "truth.jsonl", tmp_path / "out"
    with build_net(roles, tmp_path / "logs") as net:
        sim = start_simulator_in_netns(
            net["sim"].netns,
            *SIM_ARGS,
            host="0.0.0.0",
            port=SIM_PORT,
            url_host=net["sim"].address,
            truth=truth,
        )
        try:
            yield net, out, truth
        finally:
            sim.stop()  # truth flushed: read it after the block


def start_workers(
    net: Net,
    roles: list[str],
    out: Path,
    master: tuple[str, int] | None = None,
    timeout_s: float = 60,
) -> dict[str, str]:
    """Start the workers one at a time, each once the master counted the one before: which
    client id is which host's (the master logs each as it connects)."""
    ids: dict[str, str] = {}
    for count, role in enumerate(roles, start=1):
        worker = net.start_worker(role, out, master)
        deadline = time.monotonic() + timeout_s
        while True:
            ready = {m.group(1): int(m.group(2)) for m in READY.finditer(net.log("master"))}
            new = [cid for cid, n in ready.items() if n == count and cid not in ids.values()]
            if new:
                ids[role] = new[0]
                break
            assert worker.poll() is None, logs(net, "master", role)
            assert time.monotonic() < deadline, f"{role} never connected\n{logs(net, 'master')}"
            time.sleep(0.1)
    return ids


def wait_master(net: Net, master: subprocess.Popen[str]) -> tuple[int, str]:
    try:
        code = master.wait(MASTER_WAIT_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the master did not finish in {MASTER_WAIT_S} s\n{logs(net, 'master')}")
    return code, net.log("master")


def test_delay_and_loss_between_workers_and_master(tmp_path: Path) -> None:
    """50 +- 20 ms each way and 1 % of segments lost: the run completes, exact."""
    with cluster(tmp_path, 2, "relay") as (net, out, truth):
        relay_host, master_host = net["relay"], net["master"]
        relay = net.start_relay("relay", RELAY_PORT, (master_host.address, MASTER_PORT), (30, 70))
        ends = ("master", "relay", "w0", "w1")
        for role in ends:  # one segment a packet (no TSO/GSO batches): 1 % of segments lost
            ip("link", "set", net[role].link, "gso_max_segs", "1", netns=net[role].netns)
        lossy = [net[role].router_link for role in ends]
        for device in lossy:
            how = drop_share(net.router, device, 1, ports=(MASTER_PORT, RELAY_PORT))
            if how is None:
                pytest.skip("this kernel has no HTB + cls_bpf to drop packets with")
        master = net.start_master(out, 2, USERS, "6s")
        start_workers(net, ["w0", "w1"], out, (relay_host.address, RELAY_PORT))
        code, output = wait_master(net, master)
        relay.terminate()
        relay.wait(10)
        drops = {device: net.drop_stats(device) for device in lossy}
        (net.logs / "router-drops.json").write_text(json.dumps({"how": how, "links": drops}))
    seen = f"{how}; router {drops}\n{logs(net, 'master', 'relay', 'w0', 'w1')}"
    assert code == 0, seen
    summary = check_exact_merge(out, truth, workers=2)  # complete, totals == audits == truth
    assert "workers: 2 of 2 reported in full" in output, seen
    assert summary["workers"]["missing"] == []
    # the workers' connections went through the relay (they knew no other address), each
    # chunk delayed 30-70 ms
    stats = json.loads(net.log("relay").split(STATS, 1)[1].splitlines()[0])
    assert stats["connections"] >= 2 and stats["failed_connects"] == 0, stats
    assert min(stats["bytes"].values()) > 0, stats
    assert 30 <= stats["delay_ms"]["min"] <= stats["delay_ms"]["max"] <= 70.01, stats
    # the router lost segments of those connections (and their senders resent them)
    assert sum(d["drops"] for d in drops.values()) > 0, seen


def test_worker_partitioned_from_master_and_back(tmp_path: Path) -> None:
    """10 s with nothing between one worker and the master, mid-run, then back."""
    with cluster(tmp_path, 2) as (net, out, truth_path):
        # 24 s: the cut from ~4 s to ~14 s, then up to a few seconds more until TCP's backed
        # off retransmissions get through, and the run still going when the worker is back
        master = net.start_master(out, 2, USERS, "24s")
        ids = start_workers(net, ["w0", "w1"], out)
        wait_for_intervals(out / "histograms" / "tpot.hlog", 3)
        cut, master_address = net["w0"].address, net["master"].address
        rules = [("from", cut, "to", master_address), ("from", master_address, "to", cut)]
        cut_ns = time.time_ns()
        for rule in rules:
            net.router_ip("rule", "add", *rule, "blackhole", "priority", "100")
        try:
            time.sleep(10)
        finally:
            for rule in rules:
                net.router_ip("rule", "del", *rule, "blackhole", "priority", "100")
        healed_ns = time.time_ns()
        during = net.log("master")
        back = f"Worker {ids['w0']} self-healed with heartbeat"
        deadline = time.monotonic() + 30
        while back not in net.log("master") and master.poll() is None:
            assert time.monotonic() < deadline, f"w0 never came back\n{logs(net, 'master')}"
            time.sleep(0.2)
        back_while_running = master.poll() is None
        code, output = wait_master(net, master)
    seen = logs(net, "master", "w0", "w1")
    lost_line = f"Worker {ids['w0']} failed to send heartbeat, setting state to missing"
    # while cut off, the master counted the worker missing; it came back on its own
    assert lost_line in during, seen
    assert back in output and back_while_running, seen
    summary, count = merged(out)
    found = audits(out)
    assert set(found) == set(ids.values()), (found.keys(), ids)
    # at the end nothing is missing: both workers answered the flush
    assert summary["workers"]["missing"] == [] and summary["complete"] is True, seen
    assert summary["workers"]["reported_in_full"] == 2
    assert code == 0, seen
    # nothing lost, nothing counted twice: the master's totals are the workers' sums,
    # and each worker's own the truth of its requests
    assert count == sum(audit.tpot for audit in found.values()), (count, found)
    truth = every_truth(truth_path)
    for client_id in ids.values():
        truth_matches(found[client_id], truth)
    # (a request stopped before its first token sent none: no gap, not -1)
    assert count <= sum(max(len(entry["send_ns"]) - 1, 0) for entry in truth)
    # the cut-off worker went on measuring (the simulator stayed reachable), and the
    # requests it sent while cut off are in its audit and the merge (above)
    cut_off = [
        entry
        for entry in truth
        if entry["request_id"].startswith(found[ids["w0"]].prefix)
        and cut_ns < entry["arrival_ns"] < healed_ns
    ]
    assert len(cut_off) > 10, len(cut_off)
    # the time series holds every merged value once too (the cut-off worker's deltas land in
    # the interval they reach the master: its 10 s come in one interval after the heal)
    assert sum(point["tpot"]["count"] for point in summary["timeseries"]) == count


def test_worker_host_killed_mid_run(tmp_path: Path) -> None:
    """SIGKILL to every process of one worker's host: named lost, its deltas kept."""
    with cluster(tmp_path, 2) as (net, out, truth_path):
        master = net.start_master(out, 2, USERS, "10s")
        ids = start_workers(net, ["w0", "w1"], out)
        wait_for_intervals(out / "histograms" / "tpot.hlog", 3)
        time.sleep(1.5)  # both workers have reported with data a few times
        killed = net.kill_host("w0")
        code, output = wait_master(net, master)
    seen = logs(net, "master", "w1")
    assert killed, "no process in w0's namespace"
    summary, count = merged(out)
    dead, survivor_id = ids["w0"], ids["w1"]
    assert code == 1, seen
    assert summary["complete"] is False
    (missing,) = summary["workers"]["missing"]  # named by its host and index
    assert summary["workers"]["ids"][missing] == dead, seen
    assert summary["workers"]["reported_in_full"] == 1
    assert f"INCOMPLETE RUN: no final report from worker(s) {missing}" in output, seen
    found = audits(out)
    assert list(found) == [survivor_id]  # the dead host wrote nothing at the end
    survivor = found[survivor_id]
    truth = every_truth(truth_path)
    truth_matches(survivor, truth)
    # what the dead worker delivered before dying stays in the totals (it has its own read
    # delay there too), and is no more than the truth of its requests
    kept = count - survivor.tpot
    dead_prefixes = {e["request_id"][:4] for e in truth} - {survivor.prefix}
    assert len(dead_prefixes) == 1, dead_prefixes
    dead_truth = window_truth_gaps(truth, [0, 2**63 - 1], dead_prefixes.pop())
    assert 0 < kept <= dead_truth, (kept, dead_truth)
    assert missing in summary["workers"]["read_delay_p99_ms"]


def test_server_reachable_from_some_workers_only(tmp_path: Path) -> None:
    """One worker's host has no route to the simulator: its requests fail, the other's
    measure the truth."""
    with cluster(tmp_path, 2) as (net, out, truth_path):
        blind = net["w1"]  # a route to the master's link, none to the simulator's
        ip("route", "del", "default", netns=blind.netns)
        ip("route", "add", net["master"].subnet, "via", blind.gateway, netns=blind.netns)
        unreachable = ip("route", "get", net["sim"].address, netns=blind.netns, check=False)
        assert unreachable.returncode != 0, unreachable.stdout
        master = net.start_master(out, 2, USERS, "6s")
        ids = start_workers(net, ["w0", "w1"], out)
        code, output = wait_master(net, master)
    seen = logs(net, "master", "w0", "w1")
    summary, count = merged(out)
    found = audits(out)
    good, bad = found[ids["w0"]], found[ids["w1"]]
    good_counters = good.metrics.combined().counters
    bad_counters = bad.metrics.combined().counters
    # the blind worker: every request failed to connect, counted against it alone
    assert bad_counters.ok == 0 and bad.tpot == 0, seen
    assert bad_counters.failed > 0 and dict(bad_counters.errors) == {
        "connection_error": bad_counters.failed
    }, bad_counters.errors
    # the other measured normally, and exactly
    assert good_counters.failed == 0 and good_counters.ok > 0, good_counters.errors
    truth = every_truth(truth_path)
    assert all(entry["request_id"].startswith(good.prefix) for entry in truth)
    assert good.tpot > 0
    truth_matches(good, truth)
    assert count == good.tpot  # the merge: nothing from the blind worker, nothing twice
    assert summary["requests"]["errors"] == {"connection_error": bad_counters.failed}
    assert summary["requests"]["ok"] == good_counters.ok
    # both workers answered the flush: the run is complete; the failed requests make
    # Locust's exit code the one for errors (1)
    assert summary["complete"] is True and summary["workers"]["missing"] == [], seen
    assert code == 1, seen


def scrape_in(net: Net, role: str, url: str) -> dict[str, float]:
    """A Prometheus page read from ``role``'s namespace: each unlabelled sample's value."""
    fetch = "import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1], timeout=10).read().decode())"  # noqa: E501
    text = in_netns(net[role].netns, sys.executable, "-c", fetch, url).stdout
    return {
        sample.name: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if not sample.labels
    }


def test_live_gauge_of_lost_workers_is_zero_while_every_worker_reports(tmp_path: Path) -> None:
    with cluster(tmp_path, 2) as (net, out, _):
        address = f"{net['master'].address}:{METRICS_PORT}"
        master = net.start_master(out, 2, USERS, "6s", "--tpot-metrics-address", address)
        start_workers(net, ["w0", "w1"], out)
        wait_for_intervals(out / "histograms" / "tpot.hlog", 2)
        live = scrape_in(net, "master", f"http://{address}/metrics")
        code, _ = wait_master(net, master)
    assert code == 0 and live["tpot_locust_running"] == 1, (code, live)
    assert live["tpot_locust_workers_missing"] == 0, live
