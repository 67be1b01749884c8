"""Self-check of a run against the embedded simulator's ground truth (``truth.jsonl``).

The simulator logs, for every request, when each token event left for the client (``send_ns``:
the kernel's transmit stamp of its segment, else the instant before it was written) and when
the request arrived (``arrival_ns``), on the same machine's clock.
From those lines the true distributions follow with the same definitions as ours:

- TTFT = first ``send_ns`` - ``arrival_ns`` (the server's view: no connection set-up);
- ITL = consecutive ``send_ns`` differences, one per token event after the first;
- TPOT = each ITL split over the event's tokens (``tokens[i]`` samples of gap / tokens[i]).

Like the recorder, the truth's figures are those of the run's window in token time
(``TruthWindow``): every gap sent inside it, of every request (finished or ``aborted``);
every TTFT of a request that arrived inside it. True percentiles are exact (numpy,
the sample at rank p x N rounded half up, HdrHistogram's rule, ``percentile_rank``); ours
come from HDR histograms (within 0.1 %).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from tpot_locust.common import metric_catalogue as catalogue
from tpot_locust.common.metric_catalogue import ITL, TPOT, TTFT
from tpot_locust.common.percentiles import PERCENTILES, key_of, percentile_key
from tpot_locust.common.results_folder import ResultsFolder
from tpot_locust.common.run_facts import NO_FACTS, RunFacts
from tpot_locust.common.sim_schedule import (
    LATE_AFTER_NS,
    SENT_AT_ONCE_SHARE,
    client_held,
    simulator_behind,
)
from tpot_locust.metrics.histograms import exact_percentile
from tpot_locust.metrics.stalls import PROCESS_TAG, STALLS_KEY, StallWindows
from tpot_locust.report.summary_types import Coverage, SimSchedule, Summary, TruthCheck, TruthRow

CHECKED_METRICS = catalogue.names("truth_checked")
SHORTS = catalogue.shorts()  # a row's name as people read it: TPOT, not tpot


def signed(value: float | None, digits: int = 3) -> str:
    """``+0.021``, ``-0.004``: a difference to ``digits`` decimals, never ``-0.000`` (a
    difference that rounds to nothing has no sign to tell); ``-`` for none."""
    if value is None:
        return "-"
    rounded = round(value, digits)
    return f"{0.0 if rounded == 0 else rounded:+,.{digits}f}"


ProcessStalls = dict[str, StallWindows]  # request id prefix (the process) -> its windows


def load_stall_windows(folder: ResultsFolder) -> ProcessStalls | None:
    """Every process's stall windows of a run: ``OUT/client_stalls/local.json`` and the
    workers' ``OUT/workers/<id>.json``; None when none were saved."""
    records = [json.loads(f.read_text()) for f in sorted(folder.client_stalls.glob("*.json"))]
    for audit in sorted(folder.workers.glob("*.json")):
        if (record := json.loads(audit.read_text()).get(STALLS_KEY)) is not None:
            records.append(record)
    if not records:
        return None
    return {r["request_id_prefix"]: StallWindows.from_record(r) for r in records}


class TruthWindow:
    """The run's window in token time (docs/metrics.md, "The window"), on the truth's side:
    a true gap counts when its later event was sent inside it, a true TTFT when its request
    arrived inside it and had a first token, whatever the request's end (finished, cut by
    the stop, a timeout or a reset: ``aborted``)."""

    def __init__(self, run: RunFacts) -> None:
        # each measuring process's own, by the prefix of the request ids it sent (a worker's
        # closes at its own stop, a little after the master's)
        self.by_process: dict[str, tuple[int, int]] = {
            str(tag): (int(window[0]), int(window[1]))
            for tag, window in (run.process_windows_wall_ns or {}).items()
        }
        if window := run.window_wall_ns:  # the one the recorder measured in
            self.start_ns, self.end_ns = int(window[0]), int(window[1])
            return
        # older results: the run's planned window, warm-up end to cool-down start
        start_ns = run.clock_start_wall_ns or int((run.start_wall_s or 0) * 1e9)
        duration, cooldown = run.duration_s, run.cooldown_s or 0
        self.start_ns = start_ns + int((run.warmup_s or 0) * 1e9)
        self.end_ns = start_ns + int((duration - cooldown) * 1e9) if duration else 2**63 - 1

    def _of(self, record: dict[str, object]) -> tuple[int, int]:
        """The window of the process that sent ``record``'s request (else the run's)."""
        tag = str(record.get("request_id", ""))[: len(PROCESS_TAG)]
        return self.by_process.get(tag, (self.start_ns, self.end_ns))

    def events(self, sends: np.ndarray, record: dict[str, object]) -> np.ndarray:
        """Which of ``sends`` (``record``'s token events) left inside the window."""
        start, end = self._of(record)
        return (sends >= start) & (sends <= end)

    def gaps(self, sends: np.ndarray, record: dict[str, object]) -> np.ndarray:
        """Which gaps between ``sends`` (``record``'s) end inside the window: those whose
        later event left inside it."""
        return self.events(sends, record)[1:]

    def sent_inside(self, record: dict[str, Any]) -> bool:
        start, end = self._of(record)
        arrival: int = record["arrival_ns"]
        return start <= arrival <= end


class ScheduleCount:
    """The simulator against its own schedule over the window: its token events, and those
    that left over ``LATE_AFTER_NS`` after they were due (the truth's ``late_us``)."""

    def __init__(self) -> None:
        self.events = self.late = 0
        self.late_max_us = 0
        self.recorded = False  # False: the truth predates ``late_us`` (an older simulator)
        # the events of the requests with an event in the window, and those of them the
        # kernel stamped within their own write (the truth's ``kernel_sends``)
        self.written = self.sent_at_once = 0

    def add(self, record: dict[str, object], inside: np.ndarray) -> None:
        """``record``'s events, ``inside`` the window's (``TruthWindow.events``)."""
        if (late := record.get("late_us")) is None:
            return
        self.recorded = True
        self.events += int(inside.sum())
        kernel_sends = record.get("kernel_sends")
        if inside.any() and isinstance(kernel_sends, int) and 0 <= kernel_sends <= inside.size:
            self.written += int(inside.size)
            self.sent_at_once += kernel_sends
        try:  # [[event index, us], ...]; anything else says nothing of the schedule
            pairs = np.asarray(late, dtype=np.int64).reshape(-1, 2)
        except (TypeError, ValueError, OverflowError):
            return
        indices = pairs[:, 0]
        known = pairs[(indices >= 0) & (indices < inside.size)]
        counted = known[inside[known[:, 0]], 1]
        if counted.size:
            self.late += int(counted.size)
            self.late_max_us = max(self.late_max_us, int(counted.max()))

    def figures(self) -> SimSchedule | None:
        """``truth_check["schedule"]``; None where no truth line recorded its lateness."""
        if not self.recorded:
            return None
        stamped = self.sent_at_once > 0  # none at all: the truth kept no kernel stamps
        return {
            "events": self.events,
            "late": self.late,
            "late_share": round(self.late / self.events, 4) if self.events else None,
            "late_max_ms": round(self.late_max_us / 1000, 3),
            "late_after_ms": LATE_AFTER_NS / 1e6,
            "behind": simulator_behind(self.late, self.events),
            "sent_at_once": self.sent_at_once if stamped else None,
            "sent_at_once_share": (
                round(self.sent_at_once / self.written, 4) if stamped and self.written else None
            ),
            "client_held": client_held(self.sent_at_once, self.written) if stamped else None,
        }


def streamed(record: dict[str, object]) -> bool:
    """Whether a truth line is a request that sent a token event."""
    return "request_id" in record and bool(record.get("send_ns"))


def true_samples_ms(
    truth_path: Path,
    run: RunFacts,
    stalls: ProcessStalls | None = None,
    schedule: ScheduleCount | None = None,
) -> dict[str, np.ndarray]:
    """The true TTFT, ITL and TPOT samples (ms) of the run's window (``TruthWindow``);
    with ``stalls``, also ``<metric>@stall_free``: those that overlap no client stall (the
    true counterpart of the report's stall-free figures); ``schedule`` counts the window's
    late token events."""
    window = TruthWindow(run)
    parts: dict[str, list[np.ndarray]] = {name: [] for name in CHECKED_METRICS}
    free: dict[str, list[np.ndarray]] = {name: [] for name in CHECKED_METRICS}
    with open(truth_path, encoding="utf-8") as lines:
        for line in lines:
            record = json.loads(line)
            if not streamed(record):
                continue
            sends = record["send_ns"]
            stamps = np.asarray(sends, dtype=np.int64)
            tokens = np.asarray(record.get("tokens") or [1] * len(sends), dtype=np.int64)[1:]
            sent = window.events(stamps, record)
            inside = sent[1:]  # the gaps whose later event left inside (``TruthWindow.gaps``)
            if schedule is not None:
                schedule.add(record, sent)
            gaps, tokens = np.diff(stamps)[inside], tokens[inside]
            sent_inside = window.sent_inside(record)
            ttft = stamps[:1] - record["arrival_ns"] if sent_inside else stamps[:0]
            samples = {TTFT.name: ttft, ITL.name: gaps, TPOT.name: _tpot(gaps, tokens)}
            for name, values in samples.items():
                parts[name].append(values)
            if stalls is None:
                continue
            # the windows of the process that sent it (none known: nothing set aside)
            windows = stalls.get(record["request_id"][: len(PROCESS_TAG)], StallWindows())
            arrival = np.array([record["arrival_ns"]], dtype=np.int64)
            if sent_inside:
                free[TTFT.name].append(ttft[~windows.overlaps(arrival, stamps[:1])])
            gaps_free = ~windows.overlaps(stamps[:-1][inside], stamps[1:][inside])
            free[ITL.name].append(gaps[gaps_free])
            free[TPOT.name].append(_tpot(gaps[gaps_free], tokens[gaps_free]))
    samples_ms = {name: _ms(arrays) for name, arrays in parts.items()}
    if stalls is not None:
        samples_ms |= {f"{name}@stall_free": _ms(arrays) for name, arrays in free.items()}
    return samples_ms


def _tpot(gaps: np.ndarray, tokens: np.ndarray) -> np.ndarray:
    return gaps if (tokens == 1).all() else np.repeat(gaps / tokens, tokens)


def _ms(arrays: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(arrays) / 1e6 if arrays else np.zeros(0)


def _true_value(samples: np.ndarray, percentile: float | None) -> float:
    if percentile is None:
        return float(samples.max())
    return exact_percentile(samples, percentile)


def truth_check(
    summary: Summary,
    truth_path: Path,
    tolerance_ms: float | None = None,
    stalls: ProcessStalls | None = None,
) -> TruthCheck:
    """Measured against true at p50 ... p99.99 and max, per metric; ``passed`` when every
    error is within ``tolerance_ms`` (None: no tolerance given, nothing to pass).

    Where samples were set aside as client stalls, the stall-free figures are compared
    too: with the run's ``stalls`` windows, against the true samples that overlap no
    window (a server held at the same moment as the client, as on a busy machine, has its
    long gaps set aside on both sides); without them, against all true samples."""
    schedule = ScheduleCount()
    samples = true_samples_ms(truth_path, summary.get("run", NO_FACTS), stalls, schedule)
    metrics: dict[str, dict[str, TruthRow]] = {}
    worst = 0.0
    for name in CHECKED_METRICS:
        measured, true = summary["metrics"][name], samples[name]
        rows: dict[str, TruthRow] = {
            "count": {"measured": measured["count"], "true": int(true.size)}
        }
        if not true.size or not measured["count"]:
            metrics[name] = rows
            continue
        set_aside = (measured.get("client_stall") or {}).get("set_aside")
        for percentile in (*PERCENTILES, None):
            key = key_of(percentile) if percentile is not None else "max"
            true_value = _true_value(true, percentile)
            error = round(measured[key] - true_value, 4)
            row: TruthRow = {
                "measured": measured[key],
                "true": round(true_value, 4),
                "error": error,
            }
            if set_aside:
                free = samples.get(f"{name}@stall_free", true)
                true_free = _true_value(free, percentile) if free.size else 0.0
                row["stall_free"] = set_aside[key]
                row["true_stall_free"] = round(true_free, 4)
                row["stall_free_error"] = round(set_aside[key] - true_free, 4)
            worst = max(worst, abs(error))
            rows[key] = row
        metrics[name] = rows
    coverage = window_coverage(summary["metrics"][ITL.name]["count"], int(samples[ITL.name].size))
    passed = None if tolerance_ms is None else worst <= tolerance_ms and coverage["agrees"]
    return {
        "tolerance_ms": tolerance_ms,
        "passed": passed,
        "worst_error_ms": round(worst, 4),
        "coverage": coverage,
        "metrics": metrics,
        "schedule": schedule.figures(),
    }


# The measured gaps of the window agree with the true ones within this share, plus a few
# (a gap the server sent just before the window's edge that arrived just after it).
COUNT_AGREES_SHARE = 0.03
COUNT_AGREES_GAPS = 100
LOW_COVERAGE = 0.9  # below this share of the window's gaps, the report says so loudly


def window_coverage(measured: int, true: int) -> Coverage:
    """How many of the window's true token gaps the run measured, and whether the counts
    agree (``COUNT_AGREES_SHARE``)."""
    share = round(measured / true, 4) if true else None
    agrees = abs(measured - true) <= COUNT_AGREES_SHARE * true + COUNT_AGREES_GAPS
    return {"measured": measured, "true": true, "share": share, "agrees": agrees}


def format_truth_check(check: TruthCheck) -> list[str]:
    keys = [percentile_key(p) for p in PERCENTILES] + ["max"]
    lines = ["Truth check: measured - true (ms), against the simulator's truth.jsonl"]
    lines.append(f"  {'':6}" + "".join(f"{key:>10}" for key in keys))
    for name, rows in check["metrics"].items():
        if "max" not in rows:
            continue
        errors = "".join(f"{signed(rows[key]['error']):>10}" for key in keys)
        lines.append(f"  {SHORTS.get(name, name):6}{errors}")
        if "stall_free_error" in rows["max"]:
            errors = "".join(f"{signed(rows[key]['stall_free_error']):>10}" for key in keys)
            lines.append(f"  {'':6}{errors}  (client stalls set aside)")
    if coverage := check.get("coverage"):
        share = "-" if coverage["share"] is None else f"{coverage['share']:.1%}"
        lines.append(
            f"  token gaps of the window: measured {coverage['measured']:,} of the "
            f"{coverage['true']:,} the server sent ({share}; every request)"
        )
        if coverage["share"] is not None and coverage["share"] < LOW_COVERAGE:
            lines.append(f"! the run measured only {share} of its window's token gaps")
        elif not coverage["agrees"]:
            lines.append("! the measured and true counts of the window's gaps disagree")
    if check["passed"] is False:
        lines.append(
            f"! truth check failed: an error of {check['worst_error_ms']:.3f} ms is above the "
            f"tolerance of {check['tolerance_ms']:g} ms"
        )
    lines += format_schedule(check.get("schedule"), check["passed"] is False)
    return lines


def format_schedule(schedule: SimSchedule | None, truth_failed: bool = False) -> list[str]:
    """The simulator against its own schedule: a line, and a warning when it fell behind
    (``truth_failed``: the truth check beside it failed, and the warning says so)."""
    if not schedule or not schedule["events"]:
        return []
    share, limit = schedule["late_share"] or 0.0, schedule["late_after_ms"]
    line = (
        f"  the simulator's own schedule: {share:.1%} of its {schedule['events']:,} token "
        f"events left over {limit:g} ms late"
    )
    if schedule["late"]:
        line += f" (the latest {schedule['late_max_ms']:.1f} ms)"
    lines = [line]
    if (at_once := schedule.get("sent_at_once_share")) is not None:
        lines.append(
            f"  its token writes that left when written (a kernel send stamp within the "
            f"write): {at_once:.1%}"
        )
    if schedule["behind"]:
        lines.append(behind_warning(schedule, truth_failed))
    if schedule.get("client_held"):
        lines.append(held_warning(schedule))
    return lines


def held_warning(schedule: SimSchedule) -> str:
    """The one line that says this client held the server's sending: its TCP
    acknowledgements came too late for the server's congestion window."""
    share = schedule.get("sent_at_once_share") or 0.0
    return (
        f"! client held the server: only {share:.1%} of the simulator's token writes left "
        f"when written (under {SENT_AT_ONCE_SHARE:.1%}); the rest waited for this client's TCP "
        'acknowledgements, and the truth shows them late (docs/metrics.md, "What the client '
        "does to the server's TCP\")"
    )


def behind_warning(schedule: SimSchedule, truth_failed: bool = False) -> str:
    """The one line that says the embedded simulator could not keep its timing model, read
    with the truth check beside it: where the check held the measured gaps to what the
    simulator sent, they are true figures of a late server; where it failed, not even that
    (the line under "! truth check FAILED" must not say the check holds)."""
    held = (
        "the gaps it sent are not what its timing model asked for, and the measured ones "
        "failed the truth check"
        if truth_failed
        else "the gaps measured are what it sent (the truth check holds them), not what its "
        "timing model asked for"
    )
    return (
        f"! simulator behind: {schedule['late_share'] or 0:.1%} of its token events left over "
        f"{schedule['late_after_ms']:g} ms late (the latest {schedule['late_max_ms']:.1f} ms): "
        f"{held}; give it a core of its own, or fewer users"
    )
