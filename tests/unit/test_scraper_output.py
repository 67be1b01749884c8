"""The metrics scraper's output on a full disk: its file stops with one line on stderr; the
samples go on reaching the run on stdout (``server_state.scraper_output``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tpot_locust.server_state.scraper_output import ScraperOutput


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full (Linux)")
def test_a_full_disk_stops_the_file_not_the_samples(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    stdout = (tmp_path / "stdout").open("wb")
    full = Path("/dev/full").open("w")  # every flush: ENOSPC
    output = ScraperOutput(full, stdout.fileno())
    output.emit({"kind": "note", "what": "a", "message": "first"}, True)
    output.emit({"kind": "note", "what": "b", "message": "second"}, True)
    output.close({"kind": "final", "samples": 2})
    stdout.close()
    lines = [json.loads(line) for line in (tmp_path / "stdout").read_text().splitlines()]
    assert [line["kind"] for line in lines] == ["note", "note", "final"]
    said = capfd.readouterr().err
    assert said.count("No space left on device") == 1, said
    assert "/dev/full" in said and "the samples still reach the run" in said
    assert output.out is None and full.closed
