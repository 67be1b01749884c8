"""A run's results folder: ``summary.json`` and ``histograms.json``, written once at the
end of a run (strict JSON, each part in its own guard) and read back checked.

``summary`` builds the summary and its tables; this module owns the files, their names and
how they are read and written (``report.saved_results`` checks what is read).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from tpot_locust.metrics.histograms import HistogramDecodeError
from tpot_locust.metrics.recorder import MetricSet
from tpot_locust.report.saved_results import HISTOGRAMS, ResultsError, read_checked
from tpot_locust.report.summary import build_summary, built_part

SUMMARY_FILE = "summary.json"
HISTOGRAMS_FILE = "histograms.json"
# the server's /metrics sampled while the run went (harness.server_sampler), one JSON line
# a sample (wire.metrics_scrape's module docstring has the fields)
SERVER_METRICS_FILE = "server_metrics.jsonl"


def write_results(out_dir: Path, totals: MetricSet, run: dict[str, Any]) -> dict[str, Any]:
    """Write ``summary.json`` and ``histograms.json`` (everything needed to re-report).

    Nothing is lost to one broken part: each is built in its own guard, the histograms are
    written whatever the summary did, and a part that failed is named in the summary's
    ``report_error`` (with ``complete: false``), so the run says it cannot be vouched for."""
    out_dir.mkdir(parents=True, exist_ok=True)
    errors: list[str] = []
    document = built_part(errors, "histograms", lambda: histograms_document(totals, run))
    if document is None:  # the run's facts at least, and why the histograms are missing
        document = {"format": "hdrhistogram-v2-base64", "unit": "us", "run": run, "classes": {}}
    _write_json(out_dir / HISTOGRAMS_FILE, document, errors)
    written: list[str] = []  # numbers JSON cannot hold: null from here on, and said
    summary = _json_safe(build_summary(totals, run, errors), "", written)
    if written:
        summary["complete"] = False
        summary["report_error"] = "; ".join(errors + written)
    _write_json(out_dir / SUMMARY_FILE, summary, [])
    return summary


def rewrite_summary(out_dir: Path, summary: dict[str, Any]) -> None:
    """``summary.json`` again, after a later step changed the summary (strict JSON)."""
    _write_json(out_dir / SUMMARY_FILE, summary, [])


def histograms_document(totals: MetricSet, run: dict[str, Any]) -> dict[str, Any]:
    """``histograms.json``: the run's totals as HdrHistogram blobs, with the run's facts."""
    saved = {"format": "hdrhistogram-v2-base64", "unit": "us", "run": run}
    return saved | totals.encode()  # "classes" and "client"


def load_results(out_dir: Path) -> tuple[MetricSet, dict[str, Any]]:
    """A run's saved totals and facts, read through ``saved_results``: a damaged, edited or
    hostile ``histograms.json`` is a ``ValueError`` naming the file and key, nothing else."""
    if out_dir.is_file():  # a file of the run (summary.json): its folder is meant
        out_dir = out_dir.parent
    path = out_dir / HISTOGRAMS_FILE
    try:
        saved = read_checked(path, HISTOGRAMS)
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: no saved histograms (is this a run's output?)") from None
    encoded = saved if "client" in saved else saved["classes"]  # older runs: classes only
    try:
        totals = MetricSet.decode(encoded)
    except HistogramDecodeError as error:
        raise ResultsError(path, "", str(error)) from None
    return totals, saved.get("run") or {}


def _write_json(path: Path, data: dict[str, Any], problems: list[str]) -> None:
    """Write ``data`` as strict JSON (via a temporary file): a number JSON cannot hold
    (NaN, infinity) becomes null, and its key is added to ``problems``."""
    temporary = path.with_suffix(path.suffix + ".tmp")
    temporary.write_text(json.dumps(_json_safe(data, "", problems), indent=2) + "\n")
    temporary.replace(path)


def _json_safe(value: Any, key: str, problems: list[str]) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        problems.append(f"{key or '(top level)'}: {value} written as null")
        return None
    if isinstance(value, dict):
        return {str(k): _json_safe(v, f"{key}.{k}" if key else str(k), problems)
                for k, v in value.items()}  # fmt: skip
    if isinstance(value, list | tuple):
        return [_json_safe(v, f"{key}[{i}]", problems) for i, v in enumerate(value)]
    if isinstance(value, str | int | bool) or value is None:
        return value
    if isinstance(value, float):
        return value
    try:  # numpy scalars and the like
        return _json_safe(value.item(), key, problems)
    except AttributeError:
        problems.append(f"{key}: {type(value).__name__} written as text")
        return str(value)
