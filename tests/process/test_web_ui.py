"""Through Locust's web UI (HTTP, as the page does): the TPOT tab, Reset Stats, Stop."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

from tests.conftest import ROOT
from tests.helpers.distributed import free_port, start_web_cluster, stop_processes, wait_for_workers
from tpot_locust.common import metric_catalogue as catalogue
from tpot_locust.metrics.collector import INTERVAL_METRICS
from tpot_locust.sim.process import start_simulator


def post(url: str, data: dict[str, str] | None = None) -> bytes:
    body = urllib.parse.urlencode(data or {}).encode()
    with urllib.request.urlopen(urllib.request.Request(url, body, method="POST"), timeout=10) as r:
        return r.read()


def wait_up(url: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(url, timeout=2).read()
            return
        except OSError:
            time.sleep(0.2)
    raise AssertionError(f"{url} never answered")


def start_web_ui(port: int, host: str, out: Path) -> subprocess.Popen[bytes]:
    """Plain Locust with its web UI on 127.0.0.1:``port``, recording into ``out``."""
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "locust",
            "-f",
            str(ROOT / "tests/helpers/locust_distributed.py"),
            "--web-host",
            "127.0.0.1",
            "--web-port",
            str(port),
            "--host",
            host,
            "--tpot-out",
            str(out),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=ROOT,
    )


def test_reset_stats_resets_our_histograms_and_stop_writes_results(tmp_path: Path) -> None:
    out = tmp_path / "out"
    port = free_port()
    ui = f"http://127.0.0.1:{port}"
    with start_simulator("--gap-ms", "2", "--ttft-ms", "5") as sim:
        locust = start_web_ui(port, sim.url, out)
        try:
            wait_up(ui + "/")
            post(ui + "/swarm", {"user_count": "2", "spawn_rate": "2", "host": sim.url})
            time.sleep(3)
            # the TPOT tab: declared in the page, its rows in the stats the page polls
            page = urllib.request.urlopen(ui + "/", timeout=10).read().decode()
            assert "extended_tabs" in page and "TPOT" in page
            live = json.loads(urllib.request.urlopen(ui + "/stats/requests", timeout=10).read())
            (tab,) = [t for t in live["extended_stats"] if t["key"] == "tpot"]
            tpot_row = next(row for row in tab["data"] if row["metric"] == "TPOT")
            # every metric the catalogue puts in the tab is a row of the live tab, and each
            # with an interval has a row of its percentiles' 95 % intervals under it
            shown = {row["metric"] for row in tab["data"]}
            figures = {catalogue.shorts()[name] for name in catalogue.names("in_tab")}
            with_intervals = {catalogue.shorts()[name] for name in INTERVAL_METRICS}
            assert shown == figures | {f"{short} 95% interval" for short in with_intervals}
            # shown as the terminal writes them: 12,422 and 2.000 (a bare 2 beside 1.999)
            assert int(tpot_row["count"].replace(",", "")) > 0 and tpot_row["tokens_per_s"]
            assert re.fullmatch(r"[\d,]+\.\d{3}", tpot_row["mean"]), tpot_row
            assert float(tpot_row["p50"].replace(",", "")) > 0
            now = json.loads(urllib.request.urlopen(ui + "/tpot/summary.json", timeout=10).read())
            assert now["metrics"]["tpot"]["count"] > 0
            assert now["running"] is True and now["complete"] is False  # not final yet
            post(ui + "/stats/reset")  # the Reset Stats button
            time.sleep(2)
            post(ui + "/stop")  # the Stop button: our results are written at test stop
            time.sleep(2.5)  # /stats/requests is memoised for 2 s
            stats = json.loads(urllib.request.urlopen(ui + "/stats/requests", timeout=10).read())
        finally:
            locust.terminate()
            locust.wait(timeout=30)
    summary = json.loads((out / "summary.json").read_text())
    locust_count = next(
        row["num_requests"] for row in stats["stats"] if row["name"] == "/v1/chat/completions"
    )
    # both count requests finished after the reset: ours were reset with Locust's
    assert summary["requests"]["ok"] == locust_count > 0
    # every gap after the reset (docs/metrics.md, "The window"): the finished requests', and
    # those of the 2 streams in flight at the reset and at the stop (at most 59 each)
    edges = 2 * 2 * 59
    assert abs(summary["metrics"]["tpot"]["count"] - locust_count * 59) <= edges  # 60 tokens


def summary_now(ui: str) -> dict:
    return json.loads(urllib.request.urlopen(ui + "/tpot/summary.json", timeout=10).read())


def test_each_test_of_a_session_has_its_own_results_and_reset_clears_the_series(
    tmp_path: Path,
) -> None:
    out = tmp_path / "out"
    port = free_port()
    ui = f"http://127.0.0.1:{port}"
    with start_simulator("--gap-ms", "2", "--ttft-ms", "5") as sim:
        locust = start_web_ui(port, sim.url, out)
        try:
            wait_up(ui + "/")
            for _ in range(2):
                post(ui + "/swarm", {"user_count": "2", "spawn_rate": "2", "host": sim.url})
                time.sleep(3.5)
                assert len(summary_now(ui)["timeseries"]) >= 2
                post(ui + "/stats/reset")
                time.sleep(0.2)
                assert len(summary_now(ui)["timeseries"]) <= 1  # the series starts over
                time.sleep(2.5)
                post(ui + "/stop")
                time.sleep(2)
        finally:
            locust.terminate()
            locust.wait(timeout=30)
    first = json.loads((out / "summary.json").read_text())
    second = json.loads((out / "test-2" / "summary.json").read_text())
    assert "test" not in first["run"] and second["run"]["test"] == 2
    for summary in (first, second):
        series = summary["timeseries"]
        # after the reset, the series adds up to the totals
        assert sum(point["requests_ok"] for point in series) == summary["requests"]["ok"] > 0
        assert series[0]["t"] >= 3  # its first point closed after the reset


def test_the_stop_button_of_a_distributed_session_merges_every_workers_final_delta(
    tmp_path: Path,
) -> None:
    """Locust forgets a worker at its "stopped" message, before the master's test stop:
    each worker's final delta must arrive before that, or the test reads as incomplete."""
    out = tmp_path / "out"
    web_port = free_port()
    ui = f"http://127.0.0.1:{web_port}"
    locustfile = ROOT / "tests/helpers/locust_distributed.py"
    with start_simulator("--gap-ms", "2", "--ttft-ms", "5") as sim:
        processes = start_web_cluster(locustfile, sim.url, web_port, out, 2, 2)
        try:
            wait_up(ui + "/")
            wait_for_workers(ui, 2)
            post(ui + "/swarm", {"user_count": "4", "spawn_rate": "4", "host": sim.url})
            time.sleep(4)
            post(ui + "/stop")
            deadline = time.monotonic() + 30
            while not (out / "summary.json").exists():
                assert time.monotonic() < deadline, "the stop wrote no results"
                time.sleep(0.2)
        finally:
            stop_processes(processes)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["complete"], summary["workers"]
    assert summary["workers"]["reported_in_full"] == 2 and not summary["workers"]["missing"]  # noqa: PLR2004
    assert summary["requests"]["ok"] > 0
