"""The live Prometheus endpoint of a real master with two workers, scraped while a test runs
and after it stopped, read with prometheus_client's parser; and its address refused clearly.
"""

from __future__ import annotations

import json
import socket
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import ROOT, run_command
from tests.helpers.distributed import free_port, start_web_cluster, stop_processes, wait_for_workers
from tpot_locust.cli.master_api import MasterAPI
from tpot_locust.sim.process import start_simulator

LOCUSTFILE = ROOT / "tests/helpers/locust_distributed.py"


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    return {
        (s.name, tuple(sorted((k, v) for k, v in s.labels.items() if v))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }  # fmt: skip  (an empty label is none, as to Prometheus)


def test_a_master_serves_the_merged_totals_live_and_final(tmp_path: Path) -> None:
    out, web_port, metrics_port = tmp_path / "out", free_port(), free_port()
    ui, page = f"http://127.0.0.1:{web_port}", f"http://127.0.0.1:{metrics_port}/metrics"
    env = {"TPOT_METRICS_ADDRESS": f"127.0.0.1:{metrics_port}"}  # the option's variable
    with start_simulator("--gap-ms", "2", "--ttft-ms", "5") as sim:
        processes = start_web_cluster(LOCUSTFILE, sim.url, web_port, out, 2, 5, env=env)
        try:
            before = _first_scrape(page)  # the page is served from the master's start
            wait_for_workers(ui, 2)
            assert before[("tpot_locust_running", ())] == 0
            MasterAPI(ui).swarm(
                {"user_count": "4", "spawn_rate": "4", "host": sim.url, "run_time": "5s"}
            )
            counts, running = [], []
            deadline = time.monotonic() + 60
            while MasterAPI(ui).state().state not in ("stopped",) or not counts:
                assert time.monotonic() < deadline, "the test did not stop"
                now = scrape(page)
                counts.append(now[("tpot_locust_tpot_seconds_count", (("user_class", "all"),))])
                running.append(now[("tpot_locust_running", ())])
                time.sleep(0.5)
            time.sleep(1.5)  # the finishing pass publishes the test's last totals
            final = scrape(page)
            summary = json.loads((out / "summary.json").read_text())
            not_found = urllib.request.Request(page.replace("/metrics", "/anything"))
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(not_found, timeout=10)
            assert refused.value.code == 404
        finally:
            stop_processes(processes)
    assert 1 in running and counts == sorted(counts) and max(counts) > 0  # grew while it ran
    assert final[("tpot_locust_running", ())] == 0
    tpot = summary["metrics"]["tpot"]
    # the final page is the summary's totals: counts, and every percentile to the microsecond
    assert final[("tpot_locust_tpot_seconds_count", (("user_class", "all"),))] == tpot["count"]
    for key, quantile in (("p50", "0.5"), ("p99", "0.99"), ("p99.99", "0.9999"), ("max", "1")):
        labels = (("quantile", quantile), ("user_class", "all"))
        assert final[("tpot_locust_tpot_quantile_seconds", labels)] * 1000 == pytest.approx(
            tpot[key], abs=1e-6
        )
    ok = final[("tpot_locust_requests_total", (("outcome", "ok"), ("user_class", "all")))]
    assert ok == summary["requests"]["ok"] > 0


def _first_scrape(page: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    deadline = time.monotonic() + 60
    while True:
        try:
            return scrape(page)
        except OSError:
            assert time.monotonic() < deadline, "the master never served its metrics page"
            time.sleep(0.3)


def _locust(*args: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "locust",
        "-f",
        str(LOCUSTFILE),
        "--headless",
        "-u",
        "1",
        "-t",
        "1s",
        "--host",
        "http://127.0.0.1:9",
        *args,
    ]


def test_an_address_in_use_or_malformed_is_a_usage_error() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run_command(_locust("--tpot-metrics-address", f"127.0.0.1:{port}"), timeout=60)
    assert result.returncode == 2, result.stderr[-2000:]
    assert f"--tpot-metrics-address 127.0.0.1:{port}:" in result.stderr
    assert "Traceback" not in result.stderr
    for bad in ("127.0.0.1:99999", "http://x/:80", "nan"):
        result = run_command(_locust("--tpot-metrics-address", bad), timeout=60)
        assert result.returncode == 2 and "tpot-metrics-address" in result.stderr, bad
