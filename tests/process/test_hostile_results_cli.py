"""``report``, ``report --html`` and ``compare`` on hand-edited, truncated or hostile results
(issue 25, items 8 and 13): exit 2 with one ``FILE: key.path: message`` line, no traceback."""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.conftest import run_command
from tests.unit.test_hostile_results import _bomb
from tpot_locust.common.results_folder import HISTOGRAMS_FILE, SUMMARY_FILE, ResultsFolder
from tpot_locust.common.run_facts import RunFacts
from tpot_locust.metrics.histograms import record_many
from tpot_locust.metrics.metric_set import MetricSet
from tpot_locust.report.finishing import finish_run

Edit = Callable[[Path], None]


def _results(folder: Path) -> Path:
    """A real results folder, written by the finishing pass without running Locust."""
    totals = MetricSet()
    metrics = totals.for_group("chat")
    metrics.counters.ok = 40
    metrics.counters.first_send_wall_ns, metrics.counters.last_token_wall_ns = 1, 2_000_000_000
    for metric in ("tpot", "itl", "ttft", "e2e"):
        record_many(metrics.histogram(metric), np.arange(1_000, 40_000, 7))
    finish_run(ResultsFolder(folder), totals, RunFacts(scenario="good", host="http://127.0.0.1:1"))
    return folder


def _json_edit(name: str, change: Callable[[Any], Any]) -> Edit:
    def edit(folder: Path) -> None:
        path = folder / name
        path.write_text(json.dumps(change(json.loads(path.read_text()))))

    return edit


def _set(keys: tuple[str, ...], value: Any) -> Callable[[Any], Any]:
    def change(document: Any) -> Any:
        target = document
        for key in keys[:-1]:
            target = target[key]
        target[keys[-1]] = value
        return document

    return change


def _text_edit(name: str, change: Callable[[str], str]) -> Edit:
    def edit(folder: Path) -> None:
        path = folder / name
        path.write_text(change(path.read_text()))

    return edit


EDITS: dict[str, tuple[Edit, str]] = {
    "classes-list": (_json_edit(HISTOGRAMS_FILE, _set(("classes",), [])), "classes:"),
    "histogram-int": (
        _json_edit(HISTOGRAMS_FILE, _set(("classes", "chat", "histograms", "tpot"), 5)),
        "classes.chat.histograms.tpot:",
    ),
    "counter-string": (
        _json_edit(HISTOGRAMS_FILE, _set(("classes", "chat", "counters", "ok"), "7")),
        "classes.chat.counters.ok:",
    ),
    "counter-huge": (
        _text_edit(HISTOGRAMS_FILE, lambda t: t.replace('"ok": 40', '"ok": 1' + "0" * 400)),
        "counters.ok:",
    ),
    # issue 43, item 8: its 309 digits made a 430-character line
    "counter-1e308": (
        _text_edit(HISTOGRAMS_FILE, lambda t: t.replace('"ok": 40', '"ok": 1e308')),
        "counters.ok: an integer of 309 digits (1e+308) is out of range",
    ),
    "worst-gaps-text": (
        _json_edit(HISTOGRAMS_FILE, _set(("classes", "chat", "tail_gaps"), "abc")),
        "classes.chat.tail_gaps:",
    ),
    "run-text": (_json_edit(HISTOGRAMS_FILE, _set(("run",), "x")), "run:"),
    "truncated": (_text_edit(HISTOGRAMS_FILE, lambda t: t[: len(t) // 3]), "not valid JSON"),
    "histograms-list": (_json_edit(HISTOGRAMS_FILE, lambda d: [d]), "(top level):"),
    # 600 small classes: each histogram decodes to ~185 KiB (issue 43, item 4: 500 took 1.6 GB)
    "many-classes": (
        _json_edit(
            HISTOGRAMS_FILE,
            lambda d: _set(("classes",), {f"c{i}": d["classes"]["chat"] for i in range(600)})(d),
        ),
        "classes: 2,400 histograms over 600 classes; at most 2,000",
    ),
    # issue 57, item 6: the server's and the GPU's sampled series were read unchecked
    "server-series-text": (
        _json_edit(HISTOGRAMS_FILE, _set(("run", "server_metrics"), {"series": {"kv": ["x"]}})),
        "run.server_metrics.series.kv",
    ),
    "gpu-clock-huge": (
        _json_edit(
            HISTOGRAMS_FILE,
            _set(("run", "gpu_metrics"), {"sim": {"gpu": {"sm_clock_series": [[1, 1e300]]}}}),
        ),
        "run.gpu_metrics.sim.gpu.sm_clock_series",
    ),
    "zlib-bomb": (
        _json_edit(
            HISTOGRAMS_FILE, lambda d: _set(("classes", "chat", "histograms", "tpot"), _bomb())(d)
        ),
        "classes.chat.histograms.tpot: the histogram inflates past",
    ),
}
SUMMARY_EDITS: dict[str, tuple[Edit, str]] = {
    "summary-list": (_json_edit(SUMMARY_FILE, lambda d: [d]), "(top level):"),
    "verdict-text": (_json_edit(SUMMARY_FILE, _set(("slo",), "pass")), "slo:"),
    "summary-truncated": (_text_edit(SUMMARY_FILE, lambda t: t[:100]), "not valid JSON"),
}


def _cli(*args: str) -> Any:
    return run_command([sys.executable, "-m", "tpot_locust", *args], timeout=60)


def _assert_one_clear_line(result: Any, file: Path, key: str) -> None:
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"tpot-locust: {file}: "), lines
    assert len(lines[0]) < len(str(file)) + 200, lines  # readable: no value's every digit
    assert key in lines[0], lines


@pytest.fixture(scope="module")
def good(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _results(tmp_path_factory.mktemp("good") / "run")


def _edited(good: Path, tmp_path: Path, edit: Edit) -> Path:
    folder = tmp_path / "edited"
    shutil.copytree(good, folder)
    edit(folder)
    return folder


@pytest.mark.parametrize("case", sorted(EDITS))
def test_report_html_and_compare_refuse_edited_histograms(
    good: Path, tmp_path: Path, case: str
) -> None:
    edit, key = EDITS[case]
    folder = _edited(good, tmp_path, edit)
    file = folder / HISTOGRAMS_FILE
    _assert_one_clear_line(_cli("report", str(folder)), file, key)
    html_too = ("classes-list", "counter-huge", "truncated", "zlib-bomb", "many-classes")
    if case in (*html_too, "server-series-text", "gpu-clock-huge"):
        _assert_one_clear_line(_cli("report", str(folder), "--html"), file, key)
        _assert_one_clear_line(_cli("compare", str(good), str(folder)), file, key)


@pytest.mark.parametrize("case", sorted(SUMMARY_EDITS))
def test_report_html_refuses_an_edited_summary(good: Path, tmp_path: Path, case: str) -> None:
    edit, key = SUMMARY_EDITS[case]
    folder = _edited(good, tmp_path, edit)
    _assert_one_clear_line(_cli("report", str(folder), "--html"), folder / SUMMARY_FILE, key)


def test_report_html_into_a_folder_writes_report_html_there(good: Path, tmp_path: Path) -> None:
    target = tmp_path / "pages"
    target.mkdir()
    result = _cli("report", str(good), "--html", "--output", str(target))
    assert result.returncode == 0, result.stderr
    assert (target / "report.html").is_file()


def test_the_good_results_still_report_and_compare(good: Path) -> None:
    assert _cli("report", str(good)).returncode == 0
    assert _cli("compare", str(good), str(good)).returncode == 0


PLANTED = (
    "truth.jsonl",
    "report.html",
    "report.txt",
    "scenario.yaml",
    "summary.json",
    "summary.json.tmp",
    "histograms.json",
    "verdict.json",
    "junit.xml",
    "summary.md",
    "server_metrics.jsonl",
)


def test_a_run_into_a_folder_of_planted_links_writes_none_through_them(tmp_path: Path) -> None:
    """Issue 57, item 3: every results name a link to a file outside the folder (and the
    interval logs' folder a link to another): the run replaces each link with its own file,
    every target is untouched, and ``report --html`` does the same."""
    outside, out = tmp_path / "outside", tmp_path / "out"
    outside.mkdir()
    out.mkdir()
    for name in PLANTED:
        (outside / name).write_text(f"private {name}\n")
        (out / name).symlink_to(outside / name)
    (outside / "logs").mkdir()
    (out / "histograms").symlink_to(outside / "logs")
    args = ["run", "scenarios/release-gate.yaml", "--run-time", "5s", "--set", "warmup=1s"]
    args += ["--set", "cooldown=0s", "--out", str(out)]
    result = run_command([sys.executable, "-m", "tpot_locust", *args], 180)
    assert result.returncode in (0, 1), result.stdout[-2000:] + result.stderr[-2000:]
    report = run_command([sys.executable, "-m", "tpot_locust", "report", str(out), "--html"], 60)
    assert report.returncode == 0, report.stderr
    for name in PLANTED:
        assert (outside / name).read_text() == f"private {name}\n", name
    assert not any((outside / "logs").iterdir())
    written = [out / name for name in PLANTED if name != "summary.json.tmp"]
    written += [out / "histograms"]
    assert not [path for path in written if path.is_symlink()]
    assert json.loads((out / "summary.json").read_text())["metrics"]["tpot"]["count"] > 0
    assert "private" not in (out / "report.html").read_text()


@pytest.mark.parametrize("kind", ["fifo", "directory"])
def test_a_results_name_held_by_a_fifo_or_folder_is_refused_before_the_run(
    tmp_path: Path, kind: str
) -> None:
    """Issue 57, item 7: a FIFO named truth.jsonl held the simulator 20 s, then the run
    ended in a traceback; now one line and exit 2, before anything starts."""
    import os
    import time

    out = tmp_path / "out"
    out.mkdir()
    if kind == "fifo":
        os.mkfifo(out / "truth.jsonl")
    else:
        (out / "truth.jsonl").mkdir()
    started = time.monotonic()
    result = _cli("run", "scenarios/quickstart.yaml", "--run-time", "2s", "--out", str(out))
    assert result.returncode == 2 and time.monotonic() - started < 20, result.stderr
    assert "Traceback" not in result.stderr
    assert f"{out / 'truth.jsonl'}: cannot write the results file" in result.stderr
