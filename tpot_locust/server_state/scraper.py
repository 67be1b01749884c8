"""A child process that samples a server's ``/metrics`` while a run goes.

``python -m tpot_locust.server_state.scraper URL --interval 0.25 --out FILE``

Parsing a real vLLM scrape is ~11 ms of pure Python: on the gevent loop that stamps tokens
it would delay every stamp behind it, so it runs here, in its own process. On a fixed-rate
schedule (tick ``k`` at start + ``k`` x interval, never drifting) it GETs the URL with one
deadline for the whole exchange (``deadline_s``) and a size cap
(``server_metrics.MAX_BODY_BYTES``), reads it into a ``Snapshot`` and

- appends one JSON line to ``FILE`` (``server_metrics.jsonl``): ``kind`` ``sample``, the
  sample's index ``i``, ``t_wall_s`` (when it was sent), ``engine``, the series
  (``running``, ``waiting``, ``kv_usage``, the three counters' totals), the interval's
  increases (``preemptions``, ``prompt_tokens_per_s``, ``generation_tokens_per_s``, over
  ``dt_s`` since the previous good sample; None for the first, and ``resets`` names the
  counters a server restart set back) and the server's own histograms for the interval
  (``histograms``: count, sum and p50/p99 as bucket bounds);
- prints the same line without ``histograms`` to stdout, compactly, for the parent.

A sample that takes longer than one interval is counted ``slow`` and the ticks it ran over
are skipped: work never queues up. A failed sample (``kind`` ``failed``: missing endpoint,
unreachable, slow past the deadline, garbage, an unknown engine) prints one ``note`` line
the first time its kind happens, then sampling goes on: a later good sample resumes the
series. Stdout is never waited on: a line the parent's full pipe cannot take is dropped
there (the file keeps it) and counted. When stdin closes (the parent is gone) or on SIGTERM
it prints, and writes, a ``final`` line (counts, notes, ``stdout_dropped``, and the
server's own run-level percentiles of ``itl``,
``ttft``, ``queue_time``, ``prefill_time``, ``decode_time`` where exported, as the bucket
bounds each lies between: never a digit the buckets cannot carry) and exits. Numbers only:
cause windows are derived from these lines by ``metrics.server_windows``.
"""

from __future__ import annotations

import argparse
import io
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

from tpot_locust.common import env_vars
from tpot_locust.common.bounded_http import ExchangeError, exchange
from tpot_locust.common.metric_catalogue import ITL
from tpot_locust.common.percentiles import PERCENTILES as PERCENTILE_VALUES
from tpot_locust.common.percentiles import percentile_key
from tpot_locust.common.results_files import open_for_writing
from tpot_locust.common.secrets import redact_url
from tpot_locust.common.text_safety import printable
from tpot_locust.server_state.engines import COUNTERS, GAUGES, HISTOGRAMS
from tpot_locust.server_state.scraper_output import ScraperOutput
from tpot_locust.server_state.snapshots import (
    MAX_BODY_BYTES,
    ServerHistogram,
    ServerMetricsError,
    Snapshot,
    delta,
    histogram_percentile,
    parse_snapshot,
)

DEFAULT_INTERVAL_S = 0.25
MIN_INTERVAL_S = 0.05
MAX_INTERVAL_S = 60.0
MAX_DEADLINE_S = 2.0
_POLL_S = 0.05  # how soon SIGTERM is acted on
# the run-level percentiles of the server's own histograms, in the final line
PERCENTILES = tuple((percentile_key(p), p / 100) for p in PERCENTILE_VALUES)
INTERVAL_PERCENTILES = (("p50", 0.5), ("p99", 0.99))  # per sample: few observations each
# failure kinds, each noted once: the parent logs each note once
MISSING, UNREACHABLE, SLOW, GARBAGE, UNKNOWN, PARTIAL = (
    "missing",
    "unreachable",
    "slow",
    "garbage",
    "unknown_engine",
    "partial",
)


def deadline_s(interval_s: float) -> float:
    """The whole exchange's deadline: four intervals, at most ``MAX_DEADLINE_S``."""
    return min(interval_s * 4, MAX_DEADLINE_S)


def _ms(seconds: float) -> float | None:
    """Bucket bound in ms for JSON (``inf``, past the last finite bound, is None)."""
    return round(seconds * 1000.0, 6) if math.isfinite(seconds) else None


def bounds_ms(histogram: ServerHistogram, q: float) -> dict[str, float | None] | None:
    """``{"low_ms", "high_ms"}`` of the bucket holding quantile ``q`` (high None: above the
    last finite bound); None when the histogram holds nothing."""
    found = histogram_percentile(histogram.buckets, q)
    if found is None:
        return None
    low, high = found
    return {"low_ms": _ms(low), "high_ms": _ms(high)}


def histogram_figures(
    histogram: ServerHistogram, percentiles: tuple[tuple[str, float], ...]
) -> dict[str, object]:
    """A histogram's count, sum (s) and percentiles as bucket bounds."""
    count = histogram.count
    figures: dict[str, Any] = {
        "count": int(count) if count.is_integer() else count,
        "sum_s": histogram.sum,
    }
    for name, q in percentiles:
        figures[name] = bounds_ms(histogram, q)
    return figures


def own_percentiles(first: Snapshot | None, latest: Snapshot | None) -> dict[str, object]:
    """The server's own run-level percentiles: its histograms' observations between the
    first and the latest good sample (``reset``: the server restarted in between, so these
    count only since then)."""
    if first is None or latest is None:
        return {}
    run = delta(first, latest) if first is not latest else None
    figures: dict[str, Any] = {}
    for name in HISTOGRAMS:
        if name not in latest.histograms:
            continue
        histogram = run.histograms[name] if run is not None else latest.histograms[name]
        figures[name] = histogram_figures(histogram, PERCENTILES)
        figures[name]["reset"] = run is not None and name in run.resets
    return figures


def _number(value: float | None, digits: int | None = None) -> float | None:
    if value is None or not math.isfinite(value):
        return None
    return round(value, digits) if digits is not None else value


class Scraper:
    """The sampling state: the previous, first and latest good snapshot, counts, notes.
    ``emit(line, to_file)`` prints a line for the parent (and writes it to the file)."""

    def __init__(
        self,
        url: str,
        interval_s: float,
        emit: Callable[[dict[str, object], bool], None],
        fetch: Callable[[str, float], bytes] | None = None,
    ) -> None:
        self.url = url
        self.shown_url = redact_url(url)
        self.interval_s = interval_s
        self.deadline_s = deadline_s(interval_s)
        self.emit = emit
        self.fetch = fetch or _fetch
        self.previous: Snapshot | None = None
        self.first: Snapshot | None = None
        self.samples = 0
        self.slow = 0
        self.failed = 0
        self.noted: dict[str, str] = {}
        self.lock = threading.Lock()  # state and lines: the final line sees a whole sample

    def note(self, kind: str, message: str) -> None:
        """One line per kind, the first time it happens."""
        if kind in self.noted:
            return
        self.noted[kind] = message = printable(message)
        self.emit({"kind": "note", "what": kind, "message": message}, True)

    def sample(self) -> None:
        """One scrape: a sample line, or a failed line (and its note, once)."""
        wall = time.time()
        started = time.monotonic()
        try:
            body = self.fetch(self.url, self.deadline_s)
            snapshot = parse_snapshot(body, wall)
        except _Failure as failure:
            with self.lock:
                self._failed(failure.kind, failure.message, time.monotonic() - started)
            return
        except ServerMetricsError as error:
            with self.lock:
                self._failed(
                    GARBAGE,
                    f"{self.shown_url} is not a metrics endpoint: {error}",
                    time.monotonic() - started,
                )
            return
        with self.lock:
            self._sampled(snapshot, time.monotonic() - started)

    def _sampled(self, snapshot: Snapshot, elapsed: float) -> None:
        if snapshot.engine is None:
            self._failed(UNKNOWN, f"{self.shown_url}: {snapshot.reason}; no series kept", elapsed)
            return
        if snapshot.notes:
            self.note(PARTIAL, f"{self.shown_url}: {snapshot.engine}: {snapshot.notes[0]}")
        slow = elapsed > self.interval_s
        self.slow += slow
        self.emit(self._line(snapshot, slow), True)
        self.samples += 1
        self.previous = snapshot
        if self.first is None:
            self.first = snapshot

    def _failed(self, kind: str, message: str, elapsed: float) -> None:
        self.failed += 1
        slow = kind == SLOW or elapsed > self.interval_s
        self.slow += slow
        self.note(kind, message)
        self.emit({"kind": "failed", "what": kind, "t_wall_s": time.time(), "slow": slow}, True)

    def _line(self, snapshot: Snapshot, slow: bool) -> dict[str, object]:
        line: dict[str, object] = {
            "kind": "sample",
            "i": self.samples,
            "t_wall_s": snapshot.wall_time_s,
            "engine": snapshot.engine,
        }
        for name in (*GAUGES, *COUNTERS):
            line[name] = _number(getattr(snapshot, name))
        line |= {
            "dt_s": None,
            "preemptions": None,
            "prompt_tokens_per_s": None,
            "generation_tokens_per_s": None,
            "resets": [],
        }
        histograms: dict[str, Any] = {}
        if self.previous is not None:
            interval = delta(self.previous, snapshot)
            dt = snapshot.wall_time_s - self.previous.wall_time_s
            line["dt_s"] = round(dt, 6)
            line["preemptions"] = _number(interval.preemptions)
            rates = (
                ("prompt_tokens_per_s", interval.prompt_tokens),
                ("generation_tokens_per_s", interval.generation_tokens),
            )
            for name, tokens in rates:
                if dt > 0 and tokens is not None:
                    line[name] = _number(tokens / dt, 3)
            line["resets"] = list(interval.resets)
            for name, histogram in interval.histograms.items():
                if histogram.count > 0:
                    histograms[name] = histogram_figures(histogram, INTERVAL_PERCENTILES)
        # the interval's own ITL p99, as the bucket it lies in (high None: past the last)
        p99 = (histograms.get(ITL.name) or {}).get("p99") or {}
        line["itl_p99_low_ms"], line["itl_p99_high_ms"] = p99.get("low_ms"), p99.get("high_ms")
        line["slow"] = slow
        line["histograms"] = histograms
        if snapshot.gpu is not None:
            line["gpu"] = snapshot.gpu.line()
        return line

    def final(self) -> dict[str, object]:
        if not self.samples and not self.failed:  # the run ended inside the first scrape
            self.note(
                SLOW,
                f"{self.shown_url}: no scrape finished during the run (each may "
                f"take up to {self.deadline_s:g} s); no server figures",
            )
        return {
            "kind": "final",
            "url": self.shown_url,
            "interval_s": self.interval_s,
            "engine": None if self.previous is None else self.previous.engine,
            "samples": self.samples,
            "slow": self.slow,
            "failed": self.failed,
            "notes": list(self.noted.values()),
            "own_percentiles": own_percentiles(self.first, self.previous),
        }


class _Failure(Exception):
    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


def _fetch(url: str, total_s: float) -> bytes:
    """The body of a 200 answer, or ``_Failure`` naming what went wrong."""
    shown = redact_url(url)
    started = time.monotonic()
    try:
        answer = exchange(url, total_s=total_s, max_bytes=MAX_BODY_BYTES)
    except ExchangeError as error:
        text = str(error)
        # the deadline's cut, or the socket's own timeout of the same length beating it
        if "within" in text or time.monotonic() - started >= total_s * 0.9:
            raise _Failure(
                SLOW,
                f"{shown} gave no complete answer within {total_s:g} s; such samples are skipped",
            ) from None
        if "refused" in text and "MiB" in text:
            raise _Failure(GARBAGE, f"{shown}: {text}") from None
        raise _Failure(
            UNREACHABLE,
            f"{shown} cannot be read ({text}): the server serves no "
            "metrics there; sampling goes on",
        ) from None
    if answer.status != 200:
        raise _Failure(
            MISSING,
            f"{shown} answered {answer.status} {printable(answer.reason)}: "
            "the server serves no metrics there; sampling goes on",
        )
    return answer.body


def _sampling(scraper: Scraper, stop: threading.Event) -> None:
    """Tick ``k`` at start + ``k`` x interval; a sample past its tick skips the ticks it
    ran over (counted slow by the scraper), never queues them."""
    start = time.monotonic()
    tick = 0
    while not stop.is_set():
        try:
            scraper.sample()
        except Exception as error:  # a bug here must not end the sampling or the run
            with scraper.lock:
                scraper.failed += 1
                scraper.note("error", f"sampling failed: {type(error).__name__}: {error}")
        now = time.monotonic()
        tick = max(tick + 1, math.floor((now - start) / scraper.interval_s) + 1)
        stop.wait(max(0.0, start + tick * scraper.interval_s - now))


def _watch_stdin(stop: threading.Event) -> None:
    """The parent holds our stdin open; EOF (closed, or the parent died) ends us."""
    try:
        stdin = cast(io.BufferedReader, sys.stdin.buffer)  # a pipe: typeshed says BinaryIO
        while stdin.read1(4096):
            pass
    except (OSError, ValueError):
        pass
    stop.set()


def _interval(text: str) -> float:
    value = float(text)
    if not MIN_INTERVAL_S <= value <= MAX_INTERVAL_S:  # NaN too
        raise argparse.ArgumentTypeError(
            f"must be {MIN_INTERVAL_S:g} .. {MAX_INTERVAL_S:g} seconds, got {text}"
        )
    return value


BACKGROUND_NICENESS = 10  # the sampler yields the CPU to the processes that measure


def main(argv: list[str] | None = None) -> int:
    if hasattr(os, "nice"):
        try:  # its start-up and parsing must not delay a send or a read of the run's own
            os.nice(BACKGROUND_NICENESS)
        except OSError:
            pass
    parser = argparse.ArgumentParser(
        prog="python -m tpot_locust.server_state.scraper", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "url",
        nargs="?",
        default=env_vars.text(env_vars.METRICS_URL) or None,
        help="the server's metrics URL, e.g. http://127.0.0.1:8000/metrics "
        f"(default: ${env_vars.METRICS_URL}, which keeps a password out of ps)",
    )
    parser.add_argument(
        "--interval",
        type=_interval,
        default=DEFAULT_INTERVAL_S,
        help="seconds between samples (default 0.25)",
    )
    parser.add_argument("--out", type=Path, help="append the lines to this file (JSONL)")
    options = parser.parse_args(argv)
    if not options.url:
        parser.error(f"give the metrics URL (or set {env_vars.METRICS_URL})")
    stop = threading.Event()
    terminated: list[int] = []  # the handler only notes it: Event.set could deadlock there
    signal.signal(signal.SIGTERM, lambda signum, _: terminated.append(signum))
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops us, in order
    out = open_for_writing(options.out, "a") if options.out is not None else None
    output = ScraperOutput(out, sys.stdout.fileno())
    scraper = Scraper(options.url, options.interval, output.emit)
    threading.Thread(target=_watch_stdin, args=(stop,), daemon=True).start()
    sampler = threading.Thread(target=_sampling, args=(scraper, stop), daemon=True)
    sampler.start()
    while not stop.is_set() and not terminated:
        stop.wait(_POLL_S)
    stop.set()
    # a sample in flight is abandoned (its thread is a daemon): the parent waits for no
    # deadline; what was sampled is written with the final line
    sampler.join(0.05)
    with scraper.lock:
        output.close(scraper.final())
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    os._exit(code)  # not waiting for an abandoned exchange's socket
