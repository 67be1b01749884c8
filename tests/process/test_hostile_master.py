"""The supervisor's own HTTP requests against hostile servers (issue 25, item 9).

``sweep --master-url`` at a server with an endless body had grown to 1.7 GB in 3 s; one
that sent a byte every 5 s was still waited on at 30 s (the 10 s limit was per read).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT, run_command
from tests.helpers.hostile_http import hostile_http
from tpot_locust.common.bounded_http import ExchangeError, exchange
from tpot_locust.healthcheck import check


def test_a_sweep_against_an_endless_answer_stops_at_the_size_cap(tmp_path: Path) -> None:
    with hostile_http("endless") as url:
        script = (
            "import resource, sys; from tpot_locust.cli.main import main\n"
            "try:\n    code = main(sys.argv[1:])\nexcept SystemExit as e:\n    code = e.code\n"
            "print('peak_kb', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)\n"
            "sys.exit(code)\n"
        )
        result = run_command(
            [
                sys.executable,
                "-c",
                script,
                "sweep",
                str(ROOT / "scenarios/sweep.yaml"),
                "--master-url",
                url,
                "--out",
                str(tmp_path),
            ],
            timeout=120,
        )
    output = result.stdout + result.stderr
    assert result.returncode == 2, output[-2000:]  # noqa: PLR2004
    assert "answer over 64 MiB" in output and "Traceback" not in output
    peak_kb = int(output.split("peak_kb")[1].split()[0])
    assert peak_kb < 400 * 1024, peak_kb  # the cap, not the 1.7 GB of before


def test_a_trickling_answer_ends_at_the_total_deadline() -> None:
    with hostile_http("trickle", interval_s=0.5) as url:
        began = time.monotonic()
        with pytest.raises(ExchangeError, match="no complete answer within 2 s"):
            exchange(url + "/tpot/summary.json", total_s=2)
        assert time.monotonic() - began < 4  # noqa: PLR2004
        began = time.monotonic()
        assert not check(url + "/", timeout_s=1)  # a health check, likewise
        assert time.monotonic() - began < 3  # noqa: PLR2004


@pytest.mark.parametrize("path", ["/metrics", "/tpot/summary.json"])
def test_a_body_without_length_trickled_ends_at_the_deadline(path: str) -> None:
    """http.client reads such a body to the close and drops its socket: the deadline still
    holds (issue 43, item 1: it was still reading at 40 s)."""
    with hostile_http("trickle_body", interval_s=0.3) as url:
        began = time.monotonic()
        with pytest.raises(ExchangeError, match="no complete answer within 1 s"):
            exchange(url + path, total_s=1)
        assert time.monotonic() - began < 3  # noqa: PLR2004
        began = time.monotonic()
        assert not check(url + "/", timeout_s=1)  # the container health check, likewise
        assert time.monotonic() - began < 3  # noqa: PLR2004


def test_a_page_that_is_not_a_locust_ui_is_named(tmp_path: Path) -> None:
    with hostile_http("not_json") as url:
        result = run_command(
            [
                sys.executable,
                "-m",
                "tpot_locust",
                "sweep",
                str(ROOT / "scenarios/sweep.yaml"),
                "--master-url",
                url,
                "--out",
                str(tmp_path),
            ],
            timeout=60,
        )
    assert result.returncode == 2, result.stderr  # noqa: PLR2004
    assert "not JSON (is this a Locust web UI?)" in result.stderr
    assert "Traceback" not in result.stderr
