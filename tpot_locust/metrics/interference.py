"""Interference attribution: per-token gaps while prefill bursts run, against the rest.

The *interference factor* of a percentile is burst-phase value / steady-phase value: how
much a long prompt's prefill, inserted into running decode batches, stretches the gaps
users see. The worst gaps of the run are listed with the phase they fell in.
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping
from typing import Any

from hdrh.histogram import HdrHistogram

from tpot_locust.common import metric_catalogue as catalogue
from tpot_locust.common.percentiles import percentile_key
from tpot_locust.metrics.histogram_names import PHASE_METRICS
from tpot_locust.metrics.histograms import histogram_stats, without
from tpot_locust.metrics.metric_set import ClassMetrics
from tpot_locust.metrics.phases import BURST, PHASES, STEADY
from tpot_locust.metrics.recorder import phase_metric

INTERFERENCE_PERCENTILES = (50.0, 90.0, 99.0, 99.9)


def phase_histogram(metrics: ClassMetrics, name: str, phase: str) -> HdrHistogram:
    """A metric's histogram in one phase: ``burst`` as tagged; ``steady`` every other
    sample (the whole less the burst, exactly; results saved before kept it as tagged)."""
    tagged = metrics.histograms.get(phase_metric(name, phase))
    if phase == BURST:
        return metrics.read(phase_metric(name, phase))
    if tagged is not None and tagged.total_count:  # saved before: no declared name now
        return tagged
    return without(metrics.read(name), metrics.read(phase_metric(name, BURST)))


def phase_summary(metrics: ClassMetrics, tail_min_samples: int) -> dict[str, Any] | None:
    """Steady vs burst percentiles and their ratios; None when no gap fell in a burst.
    A percentile with fewer than ``tail_min_samples`` samples above it in its phase is
    listed as ``unmeasured`` (a short burst phase's p99.9 is its max)."""
    burst_count = metrics.read(phase_metric(catalogue.TPOT.name, BURST)).total_count
    if not burst_count:
        return None
    phases: dict[str, Any] = {phase: {} for phase in PHASES}
    factors: dict[str, Any] = {}
    for name in PHASE_METRICS:
        stats = {
            phase: histogram_stats(phase_histogram(metrics, name, phase), INTERFERENCE_PERCENTILES)
            for phase in PHASES
        }
        for phase, phase_stats in stats.items():
            phases[phase][name] = {"count": phase_stats.count} | {
                percentile_key(p): phase_stats.percentiles[p] / 1000
                for p in INTERFERENCE_PERCENTILES
            }
            phases[phase][name]["unmeasured"] = [
                percentile_key(p)
                for p in INTERFERENCE_PERCENTILES
                if phase_stats.count and phase_stats.above[p] < tail_min_samples
            ]
        factors[name] = {
            percentile_key(p): round(stats[BURST].percentiles[p] / stats[STEADY].percentiles[p], 2)
            if stats[STEADY].percentiles[p]
            else None
            for p in INTERFERENCE_PERCENTILES
        }
    return {"phases": phases, "interference_factor": factors}


def format_interference(summary: Mapping[str, Any]) -> list[str]:
    lines: list[str] = []
    interference = summary.get("interference")
    if interference:
        lines.append("Interference: per-token gaps during prefill bursts vs steady (ms)")
        header = "".join(f"{percentile_key(p):>10}" for p in INTERFERENCE_PERCENTILES)
        lines.append(f"  {'':14}{'count':>10}{header}")
        unmeasured = False
        for name in PHASE_METRICS:
            for phase in PHASES:
                row = interference["phases"][phase][name]
                values = "".join(_cell(row, percentile_key(p)) for p in INTERFERENCE_PERCENTILES)
                unmeasured = unmeasured or bool(row.get("unmeasured"))
                lines.append(f"  {name.upper() + ' ' + phase:14}{row['count']:10,}{values}")
            factor = interference["interference_factor"][name]
            ratios = "".join(
                f"{factor[percentile_key(p)]:9.2f}x"
                if factor[percentile_key(p)] is not None
                else f"{'-':>10}"
                for p in INTERFERENCE_PERCENTILES
            )
            lines.append(f"  {name.upper() + ' factor':14}{'':10}{ratios}")
        if unmeasured:
            lines.append(
                "  * too few samples above it in that phase: that tail is not yet measured "
                "(its value is near the phase's max; run longer or burst more often)"
            )
    worst = summary.get("worst_gaps") or []
    if worst:
        text = "Worst gaps: " + ", ".join(_worst_gap(gap) for gap in worst)
        lines.extend(textwrap.wrap(text, width=100, subsequent_indent="  "))

    return lines


def _cell(row: dict[str, Any], key: str) -> str:
    if key in row.get("unmeasured", ()):
        return f"{row[key]:9.3f}*"
    return f"{row[key]:10.3f}"


def _worst_gap(gap: dict[str, Any]) -> str:
    stall = ", client stall" if gap.get("client_stall") else ""
    return f"{gap['ms']:.1f} ms ({gap['phase']}{stall})"
