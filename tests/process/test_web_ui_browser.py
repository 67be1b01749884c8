"""The TPOT tab as a user sees it: Locust's React page in headless Chromium.

Needs Debian's ``chromium`` (``.ci/run`` installs it) and ``playwright`` (the test extra);
Playwright drives that browser and never downloads one of its own.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.browser import CHROMIUM, CHROMIUM_FLAGS, needs_chromium
from tests.helpers.distributed import free_port
from tests.process.test_web_ui import post, start_web_ui, wait_up
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
                    headers = page.get_by_role("columnheader").all_inner_texts()
                    cells = row.get_by_role("cell").all_inner_texts()
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
