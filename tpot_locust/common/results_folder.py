"""A run's results folder: the one place that names its files, and says who writes each.

While the run goes (each file by one process, as it learns its part):

- ``scenario.yaml``: the scenario as run, ``--set`` applied, secrets removed
  (``tpot-locust run`` before Locust starts; a ``--master-url`` sweep before each step);
- ``truth.jsonl``: every token as the embedded simulator sent it (the simulator);
- ``histograms/<metric>.hlog``: HdrHistogram interval logs (the master, or a local runner);
  each class's too (the metrics with intervals): ``histograms/class-<name>/<metric>.hlog``;
- ``server_metrics.jsonl``: the server's ``/metrics`` sampled while the run went (the same);
- ``gpu_metrics/<label>.jsonl``: each DCGM exporter of ``server.gpu_metrics``, likewise;
- ``client_stalls/local.json``: a local runner's stall windows, at its end;
- ``workers/<id>.json``: what each worker recorded and sent, at its end;
- ``checkpoint.json``: the merged totals and facts as they stood at the last report
  interval (the master, or a local runner; ``report.checkpoint``), removed once
  ``histograms.json`` is written: what a process killed mid-run leaves to rebuild from;
- ``histograms.json``: the run's merged totals and facts, at its end (the master): the
  input of the finishing pass, and all ``tpot-locust report`` needs to report again.

Once, after every input is in, by the finishing pass (``report.finishing``): in the Locust
master when Locust is run directly, in ``tpot-locust run`` when it supervises Locust (it has
the simulator's truth too): ``verdict.json``, ``junit.xml``, ``summary.md`` (with an SLO),
``report.html``, ``report.txt`` (the full terminal report, whose first screen the terminal
shows) and, last, ``summary.json``: a folder with a ``summary.json`` is finished.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tpot_locust.common.text_safety import safe_slug

SUMMARY_FILE = "summary.json"
HISTOGRAMS_FILE = "histograms.json"
CHECKPOINT_FILE = "checkpoint.json"
REPORT_FILE = "report.html"
REPORT_TEXT_FILE = "report.txt"
SCENARIO_FILE = "scenario.yaml"
TRUTH_FILE = "truth.jsonl"
VERDICT_FILE = "verdict.json"
JUNIT_FILE = "junit.xml"
MARKDOWN_FILE = "summary.md"
SERVER_METRICS_FILE = "server_metrics.jsonl"
# the files a run writes at the folder's top: each must be free, a file or a link to replace
RESULTS_FILES = (
    SUMMARY_FILE,
    HISTOGRAMS_FILE,
    CHECKPOINT_FILE,
    REPORT_FILE,
    REPORT_TEXT_FILE,
    SCENARIO_FILE,
    TRUTH_FILE,
    VERDICT_FILE,
    JUNIT_FILE,
    MARKDOWN_FILE,
    SERVER_METRICS_FILE,
)
GPU_METRICS_FOLDER = "gpu_metrics"
INTERVAL_LOGS_FOLDER = "histograms"
STALLS_FOLDER = "client_stalls"
WORKERS_FOLDER = "workers"


@dataclass(frozen=True)
class ResultsFolder:
    """The paths of one run's results (the module docstring says who writes each)."""

    root: Path

    @classmethod
    def of(cls, given: Path) -> ResultsFolder:
        """The folder of ``given``: a run's folder, or one of its files (``summary.json``)."""
        return cls(given.parent if given.is_file() else given)

    @property
    def summary(self) -> Path:
        return self.root / SUMMARY_FILE

    @property
    def histograms(self) -> Path:
        return self.root / HISTOGRAMS_FILE

    @property
    def checkpoint(self) -> Path:
        return self.root / CHECKPOINT_FILE

    @property
    def report(self) -> Path:
        return self.root / REPORT_FILE

    @property
    def report_text(self) -> Path:
        return self.root / REPORT_TEXT_FILE

    @property
    def scenario(self) -> Path:
        return self.root / SCENARIO_FILE

    @property
    def truth(self) -> Path:
        return self.root / TRUTH_FILE

    @property
    def verdict(self) -> Path:
        return self.root / VERDICT_FILE

    @property
    def junit(self) -> Path:
        return self.root / JUNIT_FILE

    @property
    def markdown(self) -> Path:
        return self.root / MARKDOWN_FILE

    @property
    def server_metrics(self) -> Path:
        return self.root / SERVER_METRICS_FILE

    def gpu_metrics(self, label: str) -> Path:
        """A DCGM exporter's samples (``label``: the scenario's, checked to a-z 0-9 _ -)."""
        return self.root / GPU_METRICS_FOLDER / f"{label}.jsonl"

    @property
    def interval_logs(self) -> Path:
        return self.root / INTERVAL_LOGS_FOLDER

    def interval_log(self, metric: str, class_name: str | None = None) -> Path:
        """``metric``'s interval log: all classes merged, or ``class_name``'s alone."""
        if class_name is None:
            return self.interval_logs / f"{metric}.hlog"
        return self.interval_logs / f"class-{safe_slug(class_name)}" / f"{metric}.hlog"

    @property
    def client_stalls(self) -> Path:
        return self.root / STALLS_FOLDER

    @property
    def local_stalls(self) -> Path:
        return self.client_stalls / "local.json"

    @property
    def workers(self) -> Path:
        return self.root / WORKERS_FOLDER

    def worker(self, safe_name: str) -> Path:
        """``workers/<name>.json``; ``safe_name`` already a slug (an id never picks a path)."""
        return self.workers / f"{safe_name}.json"
