"""Collector: closes intervals on the master (or a local runner) into totals and a timeline.

Deltas (from workers, or from this process's recorder) pile up in ``pending``; every report
interval ``tick`` adds them to the totals, appends a time-series point (percentiles of that
interval alone, tokens/s, users) and writes each metric's interval histogram to an
HdrHistogram interval log, as Java's ``HistogramLogWriter`` does.
"""

from __future__ import annotations

import time
from typing import IO, cast

from tpot_locust.common import metric_catalogue as catalogue
from tpot_locust.common.cooperation import let_streams_run
from tpot_locust.common.results_files import make_folder, open_for_writing
from tpot_locust.common.results_folder import ResultsFolder
from tpot_locust.common.run_facts import TimeseriesPoint
from tpot_locust.metrics.histogram_names import METRICS
from tpot_locust.metrics.histograms import histogram_stats
from tpot_locust.metrics.live_sections import LiveSections
from tpot_locust.metrics.metric_set import ClassMetrics, MetricSet
from tpot_locust.metrics.wire_delta import WireDelta

TIMESERIES_METRICS = catalogue.names("in_timeseries")
TIMESERIES_PERCENTILES = (50.0, 90.0, 99.0, 99.9)
# a class's own interval logs: the metrics whose percentiles get intervals (and a gate compares)
INTERVAL_METRICS = catalogue.names("in_compare")
MIN_FINAL_POINT_S = 0.5


class IntervalLogs:
    """One ``OUT/histograms/<metric>.hlog`` per metric, all classes merged; each class's
    ``OUT/histograms/class-<name>/<metric>.hlog`` as well (the time slices of its
    percentiles' intervals: ``metrics.intervals``; read where a run has several classes),
    opened as it first reports and written each interval it reports in, alone or not."""

    def __init__(self, folder: ResultsFolder, start_wall_s: float) -> None:
        make_folder(folder.interval_logs)
        self.folder = folder
        self.start_wall_s = start_wall_s
        self.error: str | None = None  # the write that failed (a full disk): none after it
        self.files: dict[str, IO[str]] = {name: self._open(name, None) for name in METRICS}
        self.class_files: dict[str, dict[str, IO[str]]] = {}

    def _open(self, name: str, class_name: str | None) -> IO[str]:
        path = self.folder.interval_log(name, class_name)
        make_folder(path.parent)
        handle = open_for_writing(path)  # closed in close()
        stamp = time.strftime("%a %b %d %H:%M:%S %Z %Y", time.localtime(self.start_wall_s))
        # hdrhistogram 0.10.8's output_start_time is broken: write the header ourselves.
        handle.write("#[Histogram log format version 1.2]\n")
        handle.write(f"#[StartTime: {self.start_wall_s:.3f} (seconds since epoch), {stamp}]\n")
        handle.write(f"#[Metric: {name}, values in microseconds]\n")
        handle.write(
            '"StartTimestamp","Interval_Length","Interval_Max","Interval_Compressed_Histogram"\n'
        )
        return handle

    def write_classes(
        self, by_class: dict[str, ClassMetrics], start_wall_s: float, end_wall_s: float
    ) -> None:
        """Each class's interval: every class's, from its first report on (a class alone in
        an interval is still its own slice; a one-class run's are the merged log's)."""
        if self.error is not None:
            return
        for class_name, metrics in by_class.items():
            files = self.class_files.get(class_name)
            if files is None:
                try:
                    files = {name: self._open(name, class_name) for name in INTERVAL_METRICS}
                except OSError as error:
                    self.error = f"{class_name}'s logs: {error.strerror or error}"
                    self.close()
                    return
                self.class_files[class_name] = files
            self._write(files, metrics, start_wall_s, end_wall_s)
            if self.error is not None:  # the disk filled: no class's log is opened anew
                return

    def write(self, combined: ClassMetrics, start_wall_s: float, end_wall_s: float) -> None:
        self._write(self.files, combined, start_wall_s, end_wall_s)

    def _write(
        self,
        files: dict[str, IO[str]],
        combined: ClassMetrics,
        start_wall_s: float,
        end_wall_s: float,
    ) -> None:
        for name, handle in files.items():
            let_streams_run()  # encoding takes ~0.5 ms: let streams be stamped in between
            histogram = combined.histograms.get(name)
            if histogram is None or not histogram.total_count:
                continue
            max_ms = histogram.get_max_value() / 1000
            payload = histogram.encode().decode("ascii")
            start = start_wall_s - self.start_wall_s
            try:
                handle.write(
                    f"{start:.3f},{end_wall_s - start_wall_s:.3f},{max_ms:.3f},{payload}\n"
                )
                handle.flush()
            except OSError as error:  # a full disk: the totals go on in memory, said at the end
                self.error = f"{handle.name}: {error.strerror or error} (no interval after it)"
                self.close()
                return

    def close(self) -> None:
        for handle in [
            *self.files.values(),
            *(h for f in self.class_files.values() for h in f.values()),
        ]:
            try:
                handle.close()
            except OSError:  # its last flush on a full disk: said by the write that failed
                pass
        self.files, self.class_files = {}, {}


class Collector:
    def __init__(self) -> None:
        self.totals = MetricSet()
        self.pending = MetricSet()
        self._pending_empty = True  # the next delta can become ``pending`` as it is
        self.timeseries: list[TimeseriesPoint] = []
        self.logs: IntervalLogs | None = None
        self.sections = LiveSections(INTERVAL_METRICS)
        self.start_wall_s = time.time()
        self.last_tick_wall_s = self.start_wall_s

    def start(self, folder: ResultsFolder | None) -> None:
        """A fresh run: empty totals and timeline; interval logs when there is a folder."""
        self.close()
        self.totals, self.pending, self.timeseries = MetricSet(), MetricSet(), []
        self._pending_empty = True
        self.sections = LiveSections(INTERVAL_METRICS)
        self.start_wall_s = self.last_tick_wall_s = time.time()
        if folder is not None:
            self.logs = IntervalLogs(folder, self.start_wall_s)

    def reset_totals(self) -> None:
        """Locust's Reset Stats: totals, the interval under way and the time series start
        over (a series that began before the reset would not add up to the totals)."""
        self.totals, self.pending, self._pending_empty = MetricSet(), MetricSet(), True
        self.timeseries = []
        self.sections = LiveSections(INTERVAL_METRICS)
        self.last_tick_wall_s = time.time()

    def add_delta(self, delta: MetricSet | WireDelta) -> None:
        """A worker's delta (as read off the wire) or this process's own."""
        if isinstance(delta, WireDelta):
            # buckets straight into the interval's histograms; tail gaps only where they
            # can still enter the totals' kept set (the interval's own is never read)
            delta.add_to(self.pending, bound_for=self.totals)
            self._pending_empty = False
            return
        if self._pending_empty:
            # The interval's first delta (a local run's only one) is kept as it is: copying
            # it into fresh histograms held the loop for ~2 ms a tick while users streamed.
            self.pending, self._pending_empty = delta, False
            return
        self.pending.add(delta)

    def tick(self, users: int, final: bool = False) -> None:
        """Close the interval; ``final``: the run's last one. Shorter than
        ``MIN_FINAL_POINT_S``, its point is marked ``partial`` and has no rates (nor a loop
        held share, a stop's stall over a few ms watched): they would be
        extrapolated from the few requests that ended at the stop (42,608 tokens/s over
        0.036 s, seen); its counts and percentiles stay."""
        now = time.time()
        interval, self.pending, self._pending_empty = self.pending, MetricSet(), True
        # cooperative: in a local run the users stream in this process meanwhile
        self.totals.add(interval, cooperative=True)
        combined = interval.combined(cooperative=True)
        point = self._point(combined, now, users)
        point["stalls"] = interval.client.stalls
        point["loop_lag_max_ms"] = histogram_stats(interval.client.loop_lag, ()).max / 1000
        if final and now - self.last_tick_wall_s < MIN_FINAL_POINT_S:
            point["partial"], point["tokens_per_s"] = True, None
        elif (held := interval.client.held_share) is not None:  # a few ms at the stop: none
            point["loop_held_share"] = round(held, 4)
        self.timeseries.append(point)
        by_class = interval.by_class()
        self.sections.add(combined, by_class)
        if self.logs is not None:
            self.logs.write(combined, self.last_tick_wall_s, now)
            self.logs.write_classes(by_class, self.last_tick_wall_s, now)
        self.last_tick_wall_s = now

    def _point(self, combined: ClassMetrics, now: float, users: int) -> TimeseriesPoint:
        length = max(now - self.last_tick_wall_s, 1e-9)
        point: dict[str, object] = {
            "t": round(now - self.start_wall_s, 3),
            "interval_s": round(length, 3),
            "users": users,
            # as the tokens arrived (a request's histogram samples wait for its end)
            "tokens_per_s": round(combined.counters.arrived_tokens / length, 1),
            "requests_ok": combined.counters.ok,
            "requests_failed": combined.counters.failed,
        }
        for name in TIMESERIES_METRICS:
            let_streams_run()
            stats = histogram_stats(combined.read(name), TIMESERIES_PERCENTILES)
            point[name] = {"count": stats.count} | {
                f"p{p:g}": stats.percentiles[p] / 1000 for p in TIMESERIES_PERCENTILES
            }
        # the metrics' keys beside the declared ones: what ``TimeseriesPoint`` cannot declare
        return cast(TimeseriesPoint, point)

    def close(self) -> None:
        if self.logs is not None:
            self.logs.close()
            self.logs = None
