"""Our attribution of the tail against the engine simulator's true causes (``truth.jsonl``).

In engine mode (``simulator: {profile: ...}``) the truth holds one line per engine step
(``{"type": "step", "step", "prefill_tokens", "preempted": [ids], "stall_ns", ...}``) and,
per request, the step index of each token event (``steps``). A true gap ``g`` of request
``r`` (between its token events ``g`` and ``g + 1``, 0-based; true ITL = ``send_ns[g + 1] -
send_ns[g]``) lasted exactly the steps with index in ``(steps[g], steps[g + 1]]``: the one
that produced token event ``g + 1`` and every step before it since event ``g`` (while ``r``
waited, was preempted or re-prefilled). Its true causes:

- ``prefill``: the prefill work in those steps (their ``prefill_ns``, anyone's prompt, ``r``'s
  own recompute included) **explains** the gap: it is at least ``EXPLAINS_SHARE`` of the
  gap's excess over the plain decode of its closing step (that step's time less its prefill
  and stall; ``metrics.causes.explains``). A preempted sequence's long wait is not its
  recompute's: there ``preemption`` is the cause. A prefill
  step that merely ran inside a gap some pause stretched is counted apart
  (``true_tail_causes.prefill_overlapped``), not as the cause. The gap's ``prefill_tokens``
  is their **sum** over the steps (a 16k prompt chunked over two steps counts 16k, as our
  side counts a whole prompt in flight). Truth written before ``prefill_ns`` existed:
  any prefill step in the gap;
- ``server_pause``: the server's own pauses explain the gap, by the same rule: the engine's
  stalls in those steps (``stall_ns``: planted pauses, a GC, a hiccup) and the time the
  server's process was held from sending (a step line's ``sent_ns`` after its ``end_ns``,
  on a busy machine: how much later the gap's closing step went out than its opening one);
- ``server_gc``: those of the engine's stalls that were full collections of the server's
  Python process (a step line's ``"gc": true``) explain the gap (a GC is a pause too);
- ``gpu_throttle``: what the GPU's lowered clocks added to those steps (``throttle_ns``: the
  simulator's planted throttle episodes, which its DCGM page shows) explains the gap;
- ``kv_offload``: KV moved between the GPU and CPU memory in those steps (``offload_ns``: a
  preempted sequence's KV stored, or brought back instead of recomputed) explains the gap;
- ``preemption``: one of those steps preempted a sequence, or ``r`` itself was preempted
  between the two events (its line's ``preemptions``, ``generated == g + 1``), or the
  recompute of preempted sequences (``recompute_ns``, counted out of ``prefill``) explains
  the gap.

Only the gaps the truth check counts (``truth_check.TruthWindow``: those sent inside the
run's window, of every request). The tail: true gaps strictly above the true ITL P99.9
(the sample at rank p x N rounded half up, as the truth check and our histograms; engine
gaps tie, a step's gap is every batch member's, so a tie at the percentile itself stays
out). For
each checked cause, with our ``summary["attribution"]["tail_gaps"]`` matched
by ``(request_id, gap)``: precision (of the true tail gaps we tagged with the cause, the
share truly caused by it) and recall (of the true tail gaps truly caused by it, the share
we tagged). A true tail gap missing from our
list counts as untagged; ``coverage`` says how many were there.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from tpot_locust.common.run_facts import NO_FACTS, RunFacts
from tpot_locust.metrics.causes import (
    GPU_THROTTLE,
    KV_OFFLOAD,
    PREEMPTION,
    PREFILL,
    SERVER_GC,
    SERVER_PAUSE,
    explains,
)
from tpot_locust.metrics.histograms import exact_percentile
from tpot_locust.report.attribution import cause_title
from tpot_locust.report.summary_types import (
    AttributionCheck,
    CauseScore,
    LowerLevel,
    Summary,
    ThresholdMet,
)
from tpot_locust.report.truth_check import TruthWindow, streamed

TAIL_PERCENTILE = 99.9
LOWER_PERCENTILE = 99.0  # checked too, beside: where a cause is too rare for P99.9
CHECKED_CAUSES = (PREFILL, SERVER_PAUSE, SERVER_GC, GPU_THROTTLE, KV_OFFLOAD, PREEMPTION)
# Stated, not enforced (a run does not fail on them): (cause, measure, at least).
THRESHOLDS: tuple[tuple[str, Literal["precision", "recall"], float], ...] = (
    (PREFILL, "precision", 0.9),
    (PREFILL, "recall", 0.9),
    (SERVER_PAUSE, "precision", 0.9),
    (SERVER_PAUSE, "recall", 0.9),
    (SERVER_GC, "precision", 0.9),
    (SERVER_GC, "recall", 0.9),
    (GPU_THROTTLE, "precision", 0.9),
    (GPU_THROTTLE, "recall", 0.9),
    (KV_OFFLOAD, "precision", 0.9),
    (KV_OFFLOAD, "recall", 0.9),
    (PREEMPTION, "recall", 0.8),
)


@dataclass(frozen=True)
class TrueGaps:
    """Every true token gap of the counted requests (parallel arrays, one entry a gap)."""

    request_id: np.ndarray  # str objects
    gap: np.ndarray  # g: between token events g and g + 1
    itl_ns: np.ndarray
    end_wall_ns: np.ndarray  # send_ns[g + 1], on the truth's clock
    prefill_tokens: np.ndarray  # summed over the gap's steps
    prefill_ns: np.ndarray  # their prefill work, summed; -1 where the truth has no prefill_ns
    preemption: np.ndarray  # bool
    stall_ns: np.ndarray  # engine stalls summed over the gap's steps, and the server held
    excess_ns: np.ndarray  # the gap beyond the plain decode of its closing step
    gc_ns: np.ndarray  # the part of its engine stalls that were full collections
    throttle_ns: np.ndarray  # what the GPU's lowered clocks added to its steps
    offload_ns: np.ndarray  # KV moved to or from CPU memory in its steps
    requests: int  # counted requests
    step_lines: int
    unstepped: int  # gaps with a step of their range missing from the step lines

    @property
    def prefill_overlapped(self) -> np.ndarray:
        """A prefill step ran while the gap was open, whether or not it stretched it."""
        return self.prefill_tokens > 0

    @property
    def prefill(self) -> np.ndarray:
        """The prefill work explains the gap (old truth: any prefill step in it)."""
        timed = self.prefill_ns >= 0
        return np.where(timed, explains(self.prefill_ns, self.excess_ns), self.prefill_overlapped)

    @property
    def server_gc(self) -> np.ndarray:
        """The server's full collections explain the gap."""
        return explains(self.gc_ns, self.excess_ns)

    @property
    def kv_offload(self) -> np.ndarray:
        """KV moved over PCIe (to CPU memory or back) explains the gap."""
        return explains(self.offload_ns, self.excess_ns)

    @property
    def gpu_throttle(self) -> np.ndarray:
        """The GPU's lowered clocks explain the gap."""
        return explains(self.throttle_ns, self.excess_ns)

    @property
    def server_pause(self) -> np.ndarray:
        """The server's own pauses explain the gap (old truth: any engine stall in it)."""
        timed = self.prefill_ns >= 0
        return np.where(timed, explains(self.stall_ns, self.excess_ns), self.stall_ns > 0)


def true_gaps(truth_path: Path, run: RunFacts, steps_path: Path | None = None) -> TrueGaps | None:
    """The true gaps of a run's counted requests with their true causes; None when the truth
    has no step lines (the simulator ran in gap mode). ``steps_path``: the step lines'
    own file (the simulator's ``--steps``), else they are read from ``truth_path``."""
    window = TruthWindow(run)
    # index -> prefill tokens, preempted, stall, prefill ns of new prompts (-1: the line has
    # none), late, plain ns (the step less its prefill, stall and throttle), recompute ns,
    # gc ns, throttle ns, offload ns
    steps: dict[int, tuple[int, int, int, int, int, int, int, int, int, int]] = {}
    requests: list[tuple[str, list[int], list[int], list[int]]] = []
    for path in (truth_path,) if steps_path is None else (truth_path, steps_path):
        with open(path, encoding="utf-8") as lines:
            for line in lines:
                if not line.strip():
                    continue
                record = json.loads(line)
                if record.get("type") == "step":
                    steps[int(record["step"])] = (
                        int(record["prefill_tokens"]),
                        len(record.get("preempted") or ()),
                        int(record.get("stall_ns") or 0),
                        int(record.get("prefill_ns", -1)) - int(record.get("recompute_ns") or 0),
                        _late_ns(record),
                        _plain_ns(record),
                        int(record.get("recompute_ns") or 0),
                        int(record.get("stall_ns") or 0) if record.get("gc") is True else 0,
                        int(record.get("throttle_ns") or 0),
                        int(record.get("offload_ns") or 0),
                    )
                elif path == truth_path and streamed(record):
                    own = [p["generated"] - 1 for p in record.get("preemptions") or ()]
                    requests.append(
                        (
                            str(record["request_id"]),
                            record["send_ns"],
                            record.get("steps") or [],
                            own,
                        )
                    )
    if not steps:
        return None
    size = 1 + max([*steps, *(max(s) for _, _, s, _ in requests if s)])
    # prefill, preempted, stall, line present, prefill ns, prefill ns missing, recompute ns,
    # gc ns, throttle ns, offload ns
    table = np.zeros((10, size), dtype=np.int64)
    index = np.fromiter(steps, dtype=np.int64, count=len(steps))
    values = np.array(list(steps.values()), dtype=np.int64).T
    table[:3, index] = values[:3]
    table[3, index] = 1
    table[4, index] = np.maximum(values[3], 0)
    table[5, index] = values[3] < 0
    table[6, index] = values[6]
    table[7, index] = values[7]
    table[8, index] = values[8]
    table[9, index] = values[9]
    late, plain = np.zeros(size, dtype=np.int64), np.zeros(size, dtype=np.int64)
    late[index], plain[index] = values[4], values[5]
    # cumulative sums with a leading 0: the sum over steps (a, b] is cum[b + 1] - cum[a + 1]
    cum = np.concatenate([np.zeros((10, 1), dtype=np.int64), np.cumsum(table, axis=1)], axis=1)
    names = (
        "rid",
        "gap",
        "itl_ns",
        "end",
        "pre",
        "pre_ns",
        "preempt",
        "stall",
        "gc",
        "throttle",
        "offload",
        "excess",
        "unstepped",
    )
    parts: dict[str, list[np.ndarray]] = {name: [] for name in names}
    for request_id, sends, step_ids, own in requests:
        if len(sends) < 2 or len(step_ids) != len(sends):
            continue  # one token event (not streamed): no gap
        stamps = np.asarray(sends, dtype=np.int64)
        at = np.asarray(step_ids, dtype=np.int64)
        first, last = at[:-1] + 1, at[1:] + 1
        sums = cum[:, last] - cum[:, first]
        excess = np.maximum(np.diff(stamps) - plain[at[1:]], 0)
        # a step that preempted, or one that recomputed preempted sequences long enough
        preempted = (sums[1] > 0) | explains(sums[6], excess)
        for g in own:
            if 0 <= g < preempted.size:
                preempted[g] = True
        inside = window.gaps(stamps, {"request_id": request_id})  # the window in token time
        parts["rid"].append(np.full(int(np.count_nonzero(inside)), request_id, dtype=object))
        parts["gap"].append(np.arange(preempted.size, dtype=np.int64)[inside])
        parts["itl_ns"].append(np.diff(stamps)[inside])
        parts["excess"].append(excess[inside])
        parts["gc"].append(sums[7][inside])
        parts["throttle"].append(sums[8][inside])
        parts["offload"].append(sums[9][inside])
        parts["end"].append(stamps[1:][inside])
        parts["pre"].append(sums[0][inside])
        parts["pre_ns"].append(np.where(sums[5] > 0, -1, sums[4])[inside])
        parts["preempt"].append(preempted[inside])
        held = np.maximum(late[at[1:]] - late[at[:-1]], 0)  # sent later than the one before
        parts["stall"].append((sums[2] + held)[inside])
        parts["unstepped"].append((sums[3] < last - first)[inside])
    joined = {k: np.concatenate(v) if v else np.zeros(0, dtype=np.int64) for k, v in parts.items()}
    return TrueGaps(
        request_id=joined["rid"].astype(object),
        gap=joined["gap"],
        itl_ns=joined["itl_ns"],
        end_wall_ns=joined["end"],
        prefill_tokens=joined["pre"],
        prefill_ns=joined["pre_ns"],
        preemption=joined["preempt"].astype(bool),
        stall_ns=joined["stall"],
        excess_ns=joined["excess"],
        gc_ns=joined["gc"],
        throttle_ns=joined["throttle"],
        offload_ns=joined["offload"],
        requests=len(requests),
        step_lines=len(steps),
        unstepped=int(np.count_nonzero(joined["unstepped"])),
    )


def _late_ns(step: dict[str, Any]) -> int:
    """How long after its end a step's first token went out (0 when unknown)."""
    sent, end = step.get("sent_ns"), step.get("end_ns")
    return max(0, int(sent) - int(end)) if sent and end else 0


def _plain_ns(step: dict[str, Any]) -> int:
    """What the step took less its prefill, stall, throttle and KV moves (0 without
    ``prefill_ns``)."""
    if "prefill_ns" not in step:
        return 0
    took = int(step.get("end_ns") or 0) - int(step.get("start_ns") or 0)
    named = int(step["prefill_ns"]) + int(step.get("stall_ns") or 0)
    named += int(step.get("throttle_ns") or 0) + int(step.get("offload_ns") or 0)
    return max(0, took - named)


def _unavailable(why: str) -> AttributionCheck:
    return {"available": False, "why": why}


def _ratio(part: int, whole: int) -> float | None:
    return round(part / whole, 4) if whole else None


def _our_tail(summary: Summary) -> dict[tuple[str, int], dict[str, object]] | None:
    """Our listed tail gaps by (request_id, gap); None when the summary has none."""
    attribution = summary.get("attribution")
    # read as it comes (its entries each checked below), whatever its type says
    listed: object = attribution.get("tail_gaps") if isinstance(attribution, dict) else None
    if not isinstance(listed, list):
        return None
    ours: dict[tuple[str, int], dict[str, Any]] = {}
    for entry in listed:
        if not isinstance(entry, dict) or entry.get("request_id") is None:
            continue
        gap = entry.get("gap")
        if isinstance(gap, int) and not isinstance(gap, bool):
            ours.setdefault((str(entry["request_id"]), gap), entry)
    return ours


def _causes(entry: dict[str, object]) -> list[object]:
    causes = entry.get("causes")
    return causes if isinstance(causes, list) else []


def attribution_check(
    summary: Summary, truth_path: Path, steps_path: Path | None = None
) -> AttributionCheck:
    """Precision and recall of our ``CHECKED_CAUSES`` tags on the true gaps
    above the true ITL P99.9; ``{"available": False, "why"}`` when it cannot be made."""
    ours = _our_tail(summary)
    gaps = true_gaps(truth_path, summary.get("run", NO_FACTS), steps_path)
    if gaps is None:
        return _unavailable(
            "the truth has no engine step lines: the simulator ran without a profile"
        )
    if ours is None:
        return _unavailable("summary.json has no attribution.tail_gaps")
    if not gaps.itl_ns.size:
        return _unavailable("no true token gap in the requests the run counts")
    threshold_ns, tail, entries, causes, true_tail = _tail_level(gaps, ours, TAIL_PERCENTILE)
    present = [e for e in entries if e is not None]
    errors = [
        abs(float(e["ms"]) - gaps.itl_ns[i] / 1e6)
        for i, e in zip(tail, entries, strict=True)
        if e is not None and isinstance(e.get("ms"), (int, float)) and math.isfinite(e["ms"])
    ]
    thresholds: list[ThresholdMet] = []
    for cause, measure, at_least in THRESHOLDS:
        value = causes[cause][measure]
        thresholds.append(
            {
                "cause": cause,
                "measure": measure,
                "at_least": at_least,
                "value": value,
                "met": None if value is None else value >= at_least,
            }
        )
    return {
        "available": True,
        "percentile": TAIL_PERCENTILE,
        "threshold_ms": round(threshold_ns / 1e6, 4),
        "true_gaps": int(gaps.itl_ns.size),
        "requests": gaps.requests,
        "tail_gaps": int(tail.size),
        "coverage": {
            "present": len(present),
            "of": int(tail.size),
            "share": _ratio(len(present), int(tail.size)),
            "ours_listed": len(ours),
            "worst_ms_error": round(float(max(errors)), 4) if errors else None,
        },
        "causes": causes,
        "true_tail_causes": true_tail,
        "true_prefill_tokens": {
            "rule": "sum over the gap's steps",
            "tail_median": float(np.median(gaps.prefill_tokens[tail])) if tail.size else None,
            "all_median": float(np.median(gaps.prefill_tokens)),
        },
        "unstepped_gaps": gaps.unstepped,
        "thresholds": thresholds,
        "p99": _lower_level(gaps, ours, LOWER_PERCENTILE),
    }


def _tail_level(
    gaps: TrueGaps,
    ours: dict[tuple[str, int], dict[str, object]],
    percentile: float,
    listed_only: bool = False,
) -> tuple[float, np.ndarray, list[dict[str, Any] | None], dict[str, CauseScore], dict[str, int]]:
    """The true gaps above ``percentile`` (threshold ns, their indexes, our entry for each)
    and, per checked cause, how ours and the truth's agree; the truth's causes counted.
    ``listed_only``: only the gaps our ``tail_gaps`` list has (a tail wider than it)."""
    threshold_ns = exact_percentile(gaps.itl_ns, percentile)
    tail = np.flatnonzero(gaps.itl_ns > threshold_ns)
    entries = [ours.get((gaps.request_id[i], int(gaps.gap[i]))) for i in tail]
    if listed_only:
        kept = [k for k, entry in enumerate(entries) if entry is not None]
        tail, entries = tail[kept], [entries[k] for k in kept]
    truly = {
        PREFILL: gaps.prefill[tail],
        SERVER_PAUSE: gaps.server_pause[tail],
        SERVER_GC: gaps.server_gc[tail],
        GPU_THROTTLE: gaps.gpu_throttle[tail],
        KV_OFFLOAD: gaps.kv_offload[tail],
        PREEMPTION: gaps.preemption[tail],
    }
    causes: dict[str, CauseScore] = {}
    for cause in CHECKED_CAUSES:
        true = truly[cause]
        mine = np.array([e is not None and cause in _causes(e) for e in entries], dtype=bool)
        both = int(np.count_nonzero(true & mine))
        n_true, n_tagged = int(np.count_nonzero(true)), int(np.count_nonzero(mine))
        causes[cause] = {
            "true": n_true,
            "tagged": n_tagged,
            "both": both,
            "precision": _ratio(both, n_tagged),
            "recall": _ratio(both, n_true),
        }
    named = truly[PREFILL] | truly[SERVER_PAUSE] | truly[GPU_THROTTLE] | truly[KV_OFFLOAD]
    named |= truly[PREEMPTION]
    true_tail = {
        **{cause: int(np.count_nonzero(truly[cause])) for cause in CHECKED_CAUSES},
        "prefill_overlapped": int(np.count_nonzero(gaps.prefill_overlapped[tail])),
        "none": int(np.count_nonzero(~named)),
    }
    return threshold_ns, tail, entries, causes, true_tail


def _lower_level(
    gaps: TrueGaps, ours: dict[tuple[str, int], dict[str, Any]], percentile: float
) -> LowerLevel:
    """The same check above a lower percentile, for causes too rare for P99.9 (and the
    gaps ours left with no cause), over the gaps our ``tail_gaps`` list has (the largest
    1,000: a P99 wider than that is checked on its top)."""
    threshold_ns = exact_percentile(gaps.itl_ns, percentile)
    total = int(np.count_nonzero(gaps.itl_ns > threshold_ns))
    _, tail, entries, causes, true_tail = _tail_level(gaps, ours, percentile, listed_only=True)
    present = [e for e in entries if e is not None]
    return {
        "percentile": percentile,
        "threshold_ms": round(threshold_ns / 1e6, 4),
        "tail_gaps": total,
        "present": len(present),
        "ours_none": _ratio(sum(1 for e in present if not _causes(e)), len(present)),
        "causes": causes,
        "true_tail_causes": true_tail,
    }


def _figure(row: dict[str, object], measure: str, part: str) -> str:
    value = row[measure]
    shown = "n/a" if value is None else f"{value:.2f}"
    return f"{measure} {shown} ({row['both']}/{row[part]})"


def _figures(causes: dict[str, Any], every: bool = True) -> str:
    """Each cause's precision and recall in one line (``every``: also those neither the
    truth nor ours named)."""
    return "; ".join(
        f"{cause_title(cause)} {_figure(row, 'precision', 'tagged')} "
        f"{_figure(row, 'recall', 'true')}"
        for cause, row in causes.items()
        if every or row["true"] or row["tagged"]
    )


def format_attribution_check(check: Mapping[str, Any] | None) -> list[str]:
    if check is None:
        return []
    if not check.get("available"):
        return [f"Attribution check: unavailable ({check.get('why')})"]
    coverage = check["coverage"]
    figures = _figures(check["causes"])
    lines = [
        f"Attribution check (true gaps above true ITL P{check['percentile']:g} of "
        f"{check['threshold_ms']:.3f} ms: {check['tail_gaps']}, {coverage['present']} in our "
        f"tail_gaps): {figures}"
    ]
    true_tail = check["true_tail_causes"]
    lines.append(
        "  true causes of those gaps: "
        + ", ".join(f"{cause_title(k)} {v}" for k, v in true_tail.items())
        + " (causes overlap)"
    )
    stated = []
    for row in check["thresholds"]:
        met = {True: "met", False: "NOT met", None: "n/a"}[row["met"]]
        stated.append(f"{cause_title(row['cause'])} {row['measure']} >= {row['at_least']:g} {met}")
    lines.append("  thresholds (stated, not enforced): " + "; ".join(stated))
    lower = check.get("p99")
    if isinstance(lower, dict) and lower.get("tail_gaps"):
        figures = _figures(lower["causes"], every=False)
        none = lower.get("ours_none")
        left = "" if none is None else f"; ours named no cause for {none * 100:.1f} %"
        lines.append(
            f"  above true ITL P{lower['percentile']:g} ({lower['threshold_ms']:.3f} ms:"
            f" {lower['tail_gaps']}, {lower['present']} in our tail_gaps): "
            f"{figures or 'no cause, true or ours'}{left}"
        )
    return lines
