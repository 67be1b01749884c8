"""Pictures of the tail: the live charts page of the web UI and report.html, in Chromium."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from tests.conftest import ROOT, run_command
from tests.helpers.browser import chromium_page, needs_chromium
from tests.helpers.distributed import free_port
from tests.process.test_web_ui import post, wait_up
from tpot_locust.sim.process import start_simulator

BASE = "/lt"  # served under --web-base-path, as behind a proxy


def locust(*args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "locust", *args],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def stop(*processes: subprocess.Popen[bytes]) -> None:
    for process in processes:
        process.terminate()
    for process in processes:
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()


@needs_chromium
def test_charts_page_draws_the_masters_merged_histograms(tmp_path: Path) -> None:
    web_port, master_port = free_port(), free_port()
    ui = f"http://127.0.0.1:{web_port}{BASE}"
    locustfile = str(ROOT / "tests/helpers/locust_distributed.py")
    with start_simulator("--gap-ms", "2", "--ttft-ms", "5") as sim:
        master = locust(
            "-f",
            locustfile,
            "--master",
            "--master-bind-host",
            "127.0.0.1",
            "--master-bind-port",
            str(master_port),
            "--expect-workers",
            "1",
            "--autostart",
            "-u",
            "2",
            "-r",
            "2",
            "--host",
            sim.url,
            "--web-host",
            "127.0.0.1",
            "--web-port",
            str(web_port),
            "--web-base-path",
            BASE,
            "--tpot-out",
            str(tmp_path),
        )
        worker = locust(
            "-f",
            locustfile,
            "--worker",
            "--master-host",
            "127.0.0.1",
            "--master-port",
            str(master_port),
        )
        try:
            wait_up(ui + "/")
            time.sleep(5)  # a few intervals merged from the worker
            with chromium_page() as (page, errors, requests):
                page.set_viewport_size({"width": 1400, "height": 900})
                page.goto(ui + "/tpot/charts", timeout=30_000)
                page.wait_for_selector("svg.chart polyline", timeout=30_000)
                page.wait_for_timeout(2500)  # one live refresh replaced the charts
                live_polylines = page.locator("svg.chart polyline").count()
                # a dashboard: at 1400 px the charts stand two or more a row (issue 46)
                boxes = [page.locator(".charts svg.chart").nth(i).bounding_box() for i in (0, 1)]
                timeline = page.locator("#tail-timeline svg.chart").all_text_contents()
                post(ui + "/stop")  # frozen totals: the page and the summary must agree
                time.sleep(3)
                page.reload()
                page.wait_for_selector("svg.chart polyline", timeout=30_000)
                curve = page.locator("svg.chart polyline").first.get_attribute("points") or ""
                shown_p99 = page.locator('td[data-metric="tpot"][data-stat="p99"]').inner_text()
                page.screenshot(path=str(tmp_path / "charts.png"), full_page=True)
            with urllib.request.urlopen(ui + "/tpot/summary.json", timeout=10) as response:
                summary = json.loads(response.read())
        finally:
            stop(worker, master)
    assert live_polylines >= 8  # four distributions, four time series
    first, second = boxes
    assert first and second and abs(first["y"] - second["y"]) < 1 < second["x"] - first["x"]
    # the tail's timeline and, on its time axis, the prompt tokens in prefill (ours)
    assert len(timeline) >= 2 and "Prompt tokens in prefill" in timeline[1], timeline
    assert len(curve.split()) > 10  # a curve through many percentiles
    assert float(shown_p99) == round(summary["metrics"]["tpot"]["p99"], 3) > 0
    assert not errors, errors
    assert all(url.startswith(ui) for url in requests), requests
    assert (tmp_path / "charts.png").stat().st_size > 10_000


@needs_chromium
def test_report_html_opens_from_disk_with_every_section_and_no_request(tmp_path: Path) -> None:
    runs = []
    for name, gap in (("fast", "2"), ("slow", "3")):
        out = tmp_path / name
        result = run_command(
            [
                sys.executable,
                "-m",
                "tpot_locust",
                "run",
                "scenarios/quickstart.yaml",
                "--run-time",
                "5s",
                "--users",
                "4",
                "--set",
                f"simulator.gap_ms={gap}",
                "--set",
                "server.headers={X-Api-Key: planted-secret}",
                "--out",
                str(out),
            ],
            timeout=120,
        )
        assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
        assert f"tpot-locust: report.html {out / 'report.html'}\n" in result.stdout
        runs.append(out)
    both = tmp_path / "both.html"
    overlay = run_command(
        [
            sys.executable,
            "-m",
            "tpot_locust",
            "report",
            *map(str, runs),
            "--html",
            "--output",
            str(both),
        ],
        timeout=60,
    )
    assert overlay.returncode == 0, overlay.stderr
    report = runs[0] / "report.html"
    text = report.read_text()
    assert "planted-secret" not in text and "[redacted]" in text  # the scenario, secrets out
    assert report.stat().st_size < 300_000
    with chromium_page() as (page, errors, requests):
        page.set_viewport_size({"width": 1400, "height": 900})
        page.goto(report.as_uri())
        # the top of the page (issue 46): it opens on the summary card, the seed's table in it
        page.screenshot(path=str(tmp_path / "report-top.png"))
        card = page.locator("section.card")
        card_box = card.bounding_box()
        card_text = card.inner_text()
        first_section = page.locator("details").first.get_attribute("id")
        page_text = page.locator("body").inner_text()
        headings = page.locator("h2").all_inner_texts()
        charts = page.locator("svg.chart").count()
        tail = page.locator("#why-the-tail").text_content() or ""
        tail_dots = page.locator("#why-the-tail svg.timeline circle.gap").count()
        page.screenshot(path=str(tmp_path / "report.png"), full_page=True)
        page.goto(both.as_uri())
        overlaid = page.locator('svg[aria-label="TPOT by percentile"] polyline').count()
    assert card_box is not None and card_box["y"] < 200 and card_box["height"] < 700, card_box
    for figure in ("TPOT: gap of every output token", "P99.99", "tokens/s", "truth check:"):
        assert figure in card_text, card_text
    assert first_section == "run"  # the card first, then the sections a reader opens
    literals = re.findall(r"\b(?:None|True|False|nan|inf)\b|\{'|'\}|\[\]", page_text)
    assert not literals, literals  # no Python literal reaches the page
    sections = (
        "Summary",
        "Run",
        "Truth check (measured - true, ms)",
        "Latency (ms)",
        "Percentile distributions",
        "Over time",
        "Why the tail",
        "Scenario",
    )
    for section in sections:
        assert section in headings, headings
    assert "Worst gaps" not in headings  # once: in Why the tail, with their stories
    assert charts >= 8
    assert "overlapped a cause" in tail and "Prompt tokens in prefill (ours)" in tail, tail
    assert tail_dots > 0  # the largest gaps marked on the timeline
    assert overlaid == 2  # one curve per run
    assert not errors, errors
    assert all(url.startswith("file://") for url in requests), requests


def test_the_charts_route_refuses_an_unauthenticated_request(tmp_path: Path) -> None:
    port = free_port()
    ui = f"http://127.0.0.1:{port}"
    process = locust(
        "-f",
        str(ROOT / "tests/helpers/locust_login.py"),
        "--web-login",
        "--web-host",
        "127.0.0.1",
        "--web-port",
        str(port),
        "--host",
        "http://127.0.0.1:9",
    )
    try:
        wait_up(ui + "/login")
        opener = urllib.request.build_opener(_NoRedirect)
        for path in ("/tpot/charts", "/tpot/charts/fragment", "/tpot/summary.json"):
            try:
                response = opener.open(ui + path, timeout=10)
                status, body = response.status, response.read()
            except urllib.error.HTTPError as error:
                status, body = error.code, error.read()
            assert status in (302, 401), (path, status)
            assert b"<svg" not in body and b'"metrics"' not in body
    finally:
        stop(process)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None
