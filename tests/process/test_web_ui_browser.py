"""The TPOT tab as a user sees it: Locust's React page in headless Chromium.

Needs Debian's ``chromium`` (``.ci/run`` installs it) and ``playwright`` (the test extra);
Playwright drives that browser and never downloads one of its own.
"""

from __future__ import annotations

import http.server
import re
import threading
import time
from pathlib import Path

import pytest

from tests.helpers.browser import CHROMIUM, CHROMIUM_FLAGS, chromium_page, needs_chromium
from tests.helpers.distributed import free_port
from tests.process.test_web_ui import post, start_web_ui, summary_now, wait_up
from tpot_locust.sim.process import start_simulator

pytestmark = needs_chromium


def test_tpot_tab_shows_live_percentiles_in_the_browser(tmp_path: Path) -> None:
    playwright = pytest.importorskip("playwright.sync_api")
    port = free_port()
    ui = f"http://127.0.0.1:{port}"
    with start_simulator("--gap-ms", "2", "--ttft-ms", "5") as sim:
        locust = start_web_ui(port, sim.url, tmp_path / "out")
        try:
            wait_up(ui + "/")
            post(ui + "/swarm", {"user_count": "2", "spawn_rate": "2", "host": sim.url})
            with playwright.sync_playwright() as driver:
                browser = driver.chromium.launch(
                    executable_path=str(CHROMIUM), args=CHROMIUM_FLAGS, headless=True
                )
                try:
                    page = browser.new_page()
                    page.goto(ui + "/", timeout=30_000)
                    page.get_by_role("tab", name="TPOT").click(timeout=30_000)
                    # the table fills from the stats the page polls every couple of seconds
                    row = page.get_by_role("row").filter(has_text="TPOT").first
                    row.wait_for(timeout=30_000)
                    # under it, each percentile's 95 % interval: one once 5 report intervals
                    # (1 s) have closed
                    shown = page.get_by_role("row").filter(has_text="TPOT 95% interval").first
                    shown.filter(has_text=re.compile(r"\d\.\d{3}-\d")).wait_for(timeout=30_000)
                    headers = page.get_by_role("columnheader").all_inner_texts()
                    # both rows of one poll: read together, the figure inside its interval
                    cells, intervals = (
                        found.get_by_role("cell").all_inner_texts() for found in (row, shown)
                    )
                    page.screenshot(path=str(tmp_path / "tpot-tab.png"))
                finally:
                    browser.close()
            post(ui + "/stop")
        finally:
            locust.terminate()
            locust.wait(timeout=30)
    assert "Median ms" in headers and "P99.99 ms" in headers and "Tokens/s at median" in headers
    by_column = dict(zip(headers, cells, strict=False))
    assert by_column["Metric"] == "TPOT"
    assert int(by_column["Samples"].replace(",", "")) > 0
    assert 1.0 < float(by_column["Median ms"]) < 50  # the simulator's 2 ms gaps, roughly
    median_interval = dict(zip(headers, intervals, strict=False))["Median ms"]
    low, high = (float(bound) for bound in median_interval.split("-"))
    assert low <= float(by_column["Median ms"]) <= high


def test_the_page_starts_a_test_and_another_site_cannot(tmp_path: Path) -> None:
    """The real page's Start passes the web guard; a form on another origin, submitted by
    the same browser, is refused (issue 25: no CSRF)."""
    port = free_port()
    ui = f"http://127.0.0.1:{port}"
    hostile_page = (
        f'<form method="POST" action="{ui}/swarm"><input name="user_count" value="3">'
        '<input name="spawn_rate" value="3"></form><script>document.forms[0].submit()</script>'
    ).encode()

    class Hostile(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.end_headers()
            self.wfile.write(hostile_page)

        def log_message(self, *_: object) -> None:
            pass

    site = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hostile)
    threading.Thread(target=site.serve_forever, daemon=True).start()
    with start_simulator("--gap-ms", "2", "--ttft-ms", "5") as sim:
        locust = start_web_ui(port, sim.url, tmp_path / "out")
        try:
            wait_up(ui + "/")
            with chromium_page() as (page, _errors, _requests):
                page.goto(f"http://127.0.0.1:{site.server_address[1]}/", timeout=30_000)
                page.wait_for_url(f"{ui}/swarm", timeout=30_000)
                assert "refused" in page.content()
                assert summary_now(ui)["test"] == 0  # nothing started
                page.goto(ui + "/", timeout=30_000)
                page.locator('input[name="userCount"]').fill("2")
                page.locator('input[name="spawnRate"]').fill("2")
                page.get_by_role("button", name="Start").click(timeout=30_000)
                deadline = time.monotonic() + 30
                while summary_now(ui)["test"] != 1:
                    assert time.monotonic() < deadline, "the page's own Start did not start"
                    time.sleep(0.5)
            post(ui + "/stop")
        finally:
            site.shutdown()
            locust.terminate()
            locust.wait(timeout=30)
