"""A run's ``histograms.json``: its totals and facts written (strict JSON, whole or not at
all: ``report.strict_json``) and read back checked (``report.saved_results`` checks what is
read); every file's name and who writes it: ``common.results_folder``; when:
``report.finishing``.
"""

from __future__ import annotations

from pathlib import Path

from tpot_locust.common.results_folder import ResultsFolder
from tpot_locust.common.run_facts import NO_FACTS, RunFacts
from tpot_locust.metrics.histograms import HistogramDecodeError
from tpot_locust.metrics.metric_set import MetricSet
from tpot_locust.report.saved_results import (
    HISTOGRAMS,
    ResultsError,
    read_checked,
    refuse_too_many_histograms,
)
from tpot_locust.report.strict_json import json_safe, write_json
from tpot_locust.report.summary import built_part


def write_histograms(folder: ResultsFolder, totals: MetricSet, run: RunFacts) -> list[str]:
    """``histograms.json``: the run's totals and facts (all needed to report it again).
    Returns what could not be written as it was: the run's facts are written even when its
    histograms cannot be encoded, a number JSON cannot hold as null."""
    folder.root.mkdir(parents=True, exist_ok=True)
    problems: list[str] = []
    document = built_part(problems, "histograms", lambda: histograms_document(totals, run))
    if document is None:  # the run's facts at least, and why the histograms are missing
        document = {"format": "hdrhistogram-v2-base64", "unit": "us", "run": run.to_json()}
        document["classes"] = {}
    document = json_safe(document, "", problems)
    if problems:  # a reader of the file (the supervisor's finishing pass) learns of them
        run_facts = document.setdefault("run", {})
        known = run_facts.get("report_error")
        run_facts["report_error"] = "; ".join([known, *problems] if known else problems)
        run_facts["complete"] = False
    write_json(folder.histograms, document)
    folder.checkpoint.unlink(missing_ok=True)  # saved whole: nothing to rebuild from
    return problems


def histograms_document(
    totals: MetricSet, run: RunFacts, cooperative: bool = False
) -> dict[str, object]:
    """``histograms.json``: the run's totals as HdrHistogram blobs, with the run's facts
    (``cooperative``: yielding between blobs, where nothing else changes ``totals``)."""
    saved = {"format": "hdrhistogram-v2-base64", "unit": "us", "run": run.to_json()}
    return saved | totals.encode(cooperative)  # "classes" and "client"


def load_results(out_dir: Path) -> tuple[MetricSet, RunFacts]:
    """A run's saved totals and facts (``out_dir``: its folder, or a file in it), read
    through ``saved_results``: a damaged, edited or hostile ``histograms.json`` is a
    ``ValueError`` naming the file and key, nothing else."""
    path = ResultsFolder.of(out_dir).histograms
    try:
        return read_results(path)
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: no saved histograms (is this a run's output?)") from None


def read_results(path: Path) -> tuple[MetricSet, RunFacts]:
    """The totals and facts of a file in ``histograms.json``'s shape (``checkpoint.json``
    too), checked as ``load_results`` says."""
    saved = read_checked(path, HISTOGRAMS)
    refuse_too_many_histograms(path, saved)
    encoded = saved if "client" in saved else saved["classes"]  # older runs: classes only
    try:
        totals = MetricSet.decode(encoded)
    except HistogramDecodeError as error:
        raise ResultsError(path, "", str(error)) from None
    return totals, saved.get("run", NO_FACTS)
