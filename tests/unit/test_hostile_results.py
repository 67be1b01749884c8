"""Hostile saved results and user text (issue 25, items 8, 13, 14 and "nothing is lost").

A zlib bomb in ``histograms.json`` is refused within bounded memory; hand-edited results are
one ``FILE: key.path: message``; a report part that fails at the end of a run is named in
``summary.json`` while ``histograms.json`` is still written; control characters reach
neither ``junit.xml``, the HTML nor the terminal; result folder names are safe slugs.
"""

from __future__ import annotations

import argparse
import base64
import ctypes
import json
import tracemalloc
import xml.etree.ElementTree as ET
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hdrh.codec import (
    V2_COMPRESSION_COOKIE_BASE,
    V2_ENCODING_COOKIE_BASE,
    ExternalHeader,
    PayloadHeader,
)

from tpot_locust.common.results_folder import HISTOGRAMS_FILE, SUMMARY_FILE, ResultsFolder
from tpot_locust.common.run_facts import NO_FACTS, RunFacts
from tpot_locust.common.text_safety import printable, safe_slug, xml_text
from tpot_locust.metrics.histograms import (
    HIGHEST_US,
    HistogramDecodeError,
    decode_histogram,
    new_histogram,
    record_many,
)
from tpot_locust.metrics.metric_set import MetricSet
from tpot_locust.report import summary as summary_module
from tpot_locust.report.finishing import finish_run
from tpot_locust.report.histograms_file import load_results
from tpot_locust.report.html import RunView, render_report, write_html
from tpot_locust.report.saved_results import ResultsError
from tpot_locust.report.summary import build_summary
from tpot_locust.report.tail_tables import attribution_check_parts
from tpot_locust.report.terminal_report import format_report
from tpot_locust.report.verdict_files import format_verdict, junit_tree

BOMB_BYTES = 256 * 1024 * 1024  # inflates 1000x: the compressed blob is ~250 KB


def _payload_header(lowest: int = 1, highest: int = HIGHEST_US, digits: int = 3) -> bytes:
    header = PayloadHeader()
    header.cookie = V2_ENCODING_COOKIE_BASE | 0x10
    header.payload_len = 0
    header.significant_figures = digits
    header.lowest_trackable_value = lowest
    header.highest_trackable_value = highest
    header.conversion_ratio_bits = 1.0
    return ctypes.string_at(ctypes.addressof(header), ctypes.sizeof(header))


def _blob(compressed: bytes) -> str:
    external = ExternalHeader()
    external.cookie = V2_COMPRESSION_COOKIE_BASE | 0x10
    external.length = len(compressed)
    head = ctypes.string_at(ctypes.addressof(external), ctypes.sizeof(external))
    return base64.b64encode(head + compressed).decode("ascii")


def _bomb() -> str:
    """A well-formed histogram header followed by 256 MB of zeros, compressed."""
    compressor = zlib.compressobj(9)
    parts = [compressor.compress(_payload_header())]
    zeros = bytes(1 << 24)
    parts += [compressor.compress(zeros) for _ in range(BOMB_BYTES // len(zeros))]
    parts.append(compressor.flush())
    return _blob(b"".join(parts))


def _totals() -> MetricSet:
    totals = MetricSet()
    for name in ("chat", "rag"):
        metrics = totals.for_group(name)
        metrics.counters.ok = 50
        metrics.counters.output_tokens = 500
        metrics.counters.first_send_wall_ns = 1_000_000_000
        metrics.counters.last_token_wall_ns = 3_000_000_000
        for metric in ("tpot", "itl", "ttft", "e2e"):
            record_many(metrics.histogram(metric), np.arange(1_000, 60_000, 37))
        metrics.tail_gaps = [{"ms": 12.5, "phase": "steady", "request_id": "r1"}]
    return totals


def _results(tmp_path: Path) -> Path:
    out = tmp_path / "run"
    finish_run(ResultsFolder(out), _totals(), RunFacts(scenario="s", host="http://127.0.0.1:1"))
    return out


def _edit_histograms(out: Path, edit: Any) -> None:
    path = out / HISTOGRAMS_FILE
    document = json.loads(path.read_text())
    edit(document)
    path.write_text(json.dumps(document))


# --- item 8: the zlib bomb ------------------------------------------------------------------


def test_a_zlib_bomb_in_histograms_json_is_refused_in_bounded_memory(tmp_path: Path) -> None:
    out = _results(tmp_path)
    bomb = _bomb()
    _edit_histograms(out, lambda d: d["classes"]["chat"]["histograms"].__setitem__("tpot", bomb))
    tracemalloc.start()
    try:
        with pytest.raises(ResultsError) as raised:
            load_results(out)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    message = str(raised.value)
    assert message.startswith(f"{out / HISTOGRAMS_FILE}: classes.chat.histograms.tpot: ")
    assert "inflates past" in message
    assert peak < 48 * 2**20, f"peak {peak / 2**20:.0f} MiB"


def test_a_histogram_larger_than_ours_is_refused_before_allocating_it() -> None:
    big = _blob(zlib.compress(_payload_header(1, 2**62, 5)))
    with pytest.raises(HistogramDecodeError, match="larger than this tool's"):
        decode_histogram(big)


@pytest.mark.parametrize(
    ("blob", "expected"),
    [
        (12, "not int"),
        ("%%%", "bad base64"),
        ("A" * (1 << 20), "larger than any histogram"),
        (_blob(b"not zlib at all"), "zlib"),
        (_blob(zlib.compress(b"short")), "too short"),
    ],
)
def test_a_damaged_histogram_is_a_clear_error(blob: Any, expected: str) -> None:
    with pytest.raises(HistogramDecodeError, match=expected):
        decode_histogram(blob)


def test_a_real_histogram_still_decodes_exactly() -> None:
    histogram = new_histogram()
    record_many(histogram, np.arange(1, 50_000))
    decoded = decode_histogram(histogram.encode().decode("ascii"))
    assert decoded.total_count == histogram.total_count
    assert decoded.get_value_at_percentile(99.9) == histogram.get_value_at_percentile(99.9)


# --- item 13: hand-edited results -----------------------------------------------------------


@pytest.mark.parametrize(
    ("edit", "key"),
    [
        (lambda d: d.__setitem__("classes", []), "classes: expected an object"),
        (
            lambda d: d["classes"]["chat"]["histograms"].__setitem__("tpot", 7),
            "classes.chat.histograms.tpot: expected a string",
        ),
        (
            lambda d: d["classes"]["chat"]["counters"].__setitem__("ok", "12"),
            "classes.chat.counters.ok: expected an integer",
        ),
        (
            lambda d: d["classes"]["chat"].__setitem__("tail_gaps", "abc"),
            "classes.chat.tail_gaps: expected a list",
        ),
        (lambda d: d.__setitem__("run", "x"), "run: expected an object"),
        (
            lambda d: d["run"].__setitem__("timeseries", [{"t": 1}]),
            "run.timeseries[0].users: missing",
        ),
    ],
)
def test_hand_edited_histograms_name_the_file_and_key(tmp_path: Path, edit: Any, key: str) -> None:
    out = _results(tmp_path)
    _edit_histograms(out, edit)
    with pytest.raises(ResultsError, match="^" + str(out / HISTOGRAMS_FILE) + ": ") as raised:
        load_results(out)
    assert key in str(raised.value)


def test_huge_numbers_nan_and_truncation_are_clear_errors(tmp_path: Path) -> None:
    out = _results(tmp_path)
    path = out / HISTOGRAMS_FILE
    text = path.read_text()
    path.write_text(text.replace('"ok": 50', '"ok": 1' + "0" * 400, 1))
    with pytest.raises(
        ResultsError,
        match=r"counters\.ok: expected an integer, found an "
        "integer of 401 digits",
    ):
        load_results(out)
    path.write_text(text.replace('"output_tokens": 500', '"output_tokens": NaN', 1))
    with pytest.raises(ResultsError, match="output_tokens: expected an integer, found NaN"):
        load_results(out)
    path.write_text(text[: len(text) // 2])
    with pytest.raises(ResultsError, match="not valid JSON .*truncated"):
        load_results(out)
    path.unlink()
    path.mkdir()
    with pytest.raises(ResultsError, match="not a regular file"):
        load_results(out)


# --- nothing is lost at the end of a run ----------------------------------------------------


def test_a_failing_report_part_is_named_and_the_rest_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*_: Any) -> None:
        raise OverflowError("int too large to convert")

    monkeypatch.setattr(summary_module, "phase_summary", broken)
    out = tmp_path / "run"
    run = RunFacts(scenario="s", warmup_s=float("nan"))
    summary = finish_run(ResultsFolder(out), _totals(), run).summary
    saved = json.loads((out / SUMMARY_FILE).read_text(), parse_constant=pytest.fail)
    assert saved["complete"] is False and summary["complete"] is False
    assert "totals interference: OverflowError: int too large" in saved["report_error"]
    assert "class chat interference" in saved["report_error"]
    assert "run.warmup_s: nan written as null" in saved["report_error"]
    assert summary["run"].warmup_s is None  # what later steps rewrite stays strict JSON
    assert saved["requests"]["ok"] == 100 and saved["metrics"]["tpot"]["count"] > 0
    assert set(saved["classes"]) == {"chat", "rag"}
    monkeypatch.undo()
    totals, run = load_results(out)  # histograms.json is whole, and strict JSON
    assert build_summary(totals, run)["requests"]["ok"] == 100
    assert "REPORT INCOMPLETE" in format_report(saved | {"run": RunFacts.from_json(saved["run"])})


def test_a_summary_part_that_fails_whole_leaves_the_others(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*_: Any) -> None:
        raise ValueError("cannot convert float NaN to integer")

    monkeypatch.setattr(summary_module, "client_health", broken)
    errors: list[str] = []
    summary = build_summary(_totals(), NO_FACTS, errors)
    assert errors == ["client health: ValueError: cannot convert float NaN to integer"]
    assert summary["requests"]["ok"] == 100 and summary["report_error"] == errors[0]


def test_the_end_of_a_run_writes_everything_but_the_failed_part(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from locust.env import Environment

    from tpot_locust.harness.run import run_state
    from tpot_locust.report import report_files

    def broken(*_: Any) -> None:
        raise OverflowError("int too large to convert to float")

    options = argparse.Namespace(tpot_out=str(tmp_path), headless=True)
    state = run_state.RunState(Environment(user_classes=[], parsed_options=options))
    state.collector.start(state.folder)
    state.collector.totals.add(_totals())
    monkeypatch.setattr(report_files, "render_report", broken)
    summary = state.finish()
    assert state.environment.process_exit_code == 3
    saved = json.loads((tmp_path / SUMMARY_FILE).read_text())
    assert saved["report_error"] == "report.html: OverflowError: int too large to convert to float"
    assert saved["complete"] is False and summary["requests"]["ok"] == 100
    assert load_results(tmp_path)[0].combined().counters.ok == 100


# --- item 14: control characters and names --------------------------------------------------

HOSTILE = "chat\x1b[31m\x00\x01\x0b\u202e\ud800\n--FAIL"


def _verdict() -> dict[str, Any]:
    check = {
        "name": f"{HOSTILE} p99",
        "verdict": "fail",
        "why": f"server said \x1b]0;x\x07{HOSTILE}",
        "measured": 3.0,
        "unit": "ms",
        "samples_above": 4,
    }
    return {
        "verdict": "fail",
        "exit_code": 1,
        "checks": [check],
        "run_invalid": [f"bad {HOSTILE}"],
        "warnings": [HOSTILE],
        "insufficient_policy": "fail",
    }


def test_junit_xml_stays_well_formed_with_control_characters(tmp_path: Path) -> None:
    path = tmp_path / "junit.xml"
    junit_tree(_verdict(), HOSTILE).write(path, encoding="utf-8", xml_declaration=True)
    root = ET.parse(path).getroot()  # an XML parser reads it: CI reporters can
    case = root.find("testsuite/testcase")
    assert case is not None and case.get("name", "").startswith("chat\\x1b[31m\\x00")


def test_terminal_output_carries_no_escape_sequence() -> None:
    lines = format_verdict(_verdict())
    summary = build_summary(_totals())
    summary["requests"]["errors"] = {HOSTILE: 3}
    summary["run"] = RunFacts(stopped_because=HOSTILE)
    text = "\n".join(lines) + format_report(summary, scope=f"class {HOSTILE}")
    assert not any(c in text for c in "\x1b\x00\x01\x0b\u202e\ud800")
    assert all("--FAIL" not in line.lstrip()[:6] for line in text.splitlines())


def test_the_html_report_drops_control_characters(tmp_path: Path) -> None:
    totals = _totals()
    summary = build_summary(totals) | {"slo": _verdict()}
    html = render_report([RunView(HOSTILE, summary, totals, f"name: {HOSTILE}\n")])
    assert not any(c in html for c in "\x1b\x00\x01\x0b\ud800")  # what XML and HTML forbid
    written = write_html(tmp_path, [RunView("r", build_summary(totals), totals)])
    assert written == tmp_path / "report.html" and written.is_file()


def test_an_edited_attribution_check_is_shown_not_raised() -> None:
    """summary.json's attribution check reaches report.html unchecked: a threshold's
    ``met`` that is no bool (a list cannot even be a dict key) reads n/a."""
    check = {"available": True, "thresholds": [{"met": [1]}, {"met": 1}, {"met": True}]}
    html = "".join(attribution_check_parts(check))
    assert html.count('<span class="note">n/a</span>') == 2
    assert html.count('<span class="pass">met</span>') == 1


@pytest.mark.parametrize(
    ("name", "slug"),
    [
        ("../../x", "x"),
        ("a/b/c", "a-b-c"),
        ("", "run"),
        ("..", "run"),
        ("--version", "version"),
        ("café run", "cafe-run"),
        ("\x00\x1b[31m", "31m"),
        ("ok-1.2_3", "ok-1.2_3"),
        ("x" * 500, "x" * 64),
    ],
)
def test_safe_slug_keeps_result_folders_inside_results(name: str, slug: str) -> None:
    assert safe_slug(name) == slug
    assert "/" not in slug and not slug.startswith(".")


def test_printable_and_xml_text() -> None:
    assert printable("a\x1b[1;31mred\x1b[0m") == "ared"
    assert printable("line\nnext") == "line\\x0anext"
    assert xml_text("tab\tok\x01") == "tab\tok\\x01"


def test_a_histogram_whose_total_passes_any_run_is_refused_not_read_as_empty() -> None:
    """Issue 43, item 8: a histogram whose count overflowed decoded as empty, and its
    metric's section vanished with exit 0."""
    histogram = new_histogram()
    for value in range(1, 20_001):  # each bucket within the bound, their sum far past it
        histogram.record_value(value, 2**40)
    with pytest.raises(HistogramDecodeError, match="a total of 2.2e\\+16 samples"):
        decode_histogram(histogram.encode())


def test_an_empty_headline_metric_is_said_not_dropped() -> None:
    metric_set = MetricSet()
    metric_set.for_group("chat").counters.ok = 1
    text = summary_module.format_report(summary_module.build_summary(metric_set))
    assert "TPOT: no samples (no token gap arrived inside the window)" in text
    assert "TTFT: no samples (no request sent inside the window had its first token)" in text


def test_no_python_literal_reaches_the_html_report() -> None:
    """Issue 46, item 2: ``tolerance None ms: passed None`` and ``busy False`` were printed
    in every report: values are formatted for people."""
    import html as html_module
    import re

    totals = _totals()
    summary = build_summary(totals) | {
        "truth_check": {
            "tolerance_ms": None,
            "passed": None,
            "worst_error_ms": 0.01,
            "metrics": {"tpot": {"p50": {"error": 0.001}}},
        }
    }
    page = render_report([RunView("run", summary, totals)])
    text = html_module.unescape(re.sub(r"<[^>]+>", " ", page))
    assert not re.findall(r"\b(None|True|False)\b", text), re.findall(
        r".{40}\b(?:None|True|False)\b.{20}", text
    )
    assert "shown, not gated" in text
