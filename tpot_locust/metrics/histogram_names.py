"""Every histogram a recorder keeps, by name, as the catalogue declares it.

Each record of ``common.metric_catalogue`` (its metrics and ``AUXILIARY``) is a histogram,
and its flags give it copies, ``metric@tag``: per phase (``phased``: ``@burst``; steady is
every other sample), per cause (``causes``: ``@prefill`` ... ``@none``, the samples no cause
window overlapped) and set aside as a client stall's (``stall_tagged``: ``@client_stall``).
Every histogram is also kept per metric group (a class, or a class and its model): that is
the key of its set, not part of its name. ``ClassMetrics.histogram`` refuses any other
name, so that a misspelt one fails where it is first used.
"""

from __future__ import annotations

from tpot_locust.common import metric_catalogue as catalogue
from tpot_locust.metrics.causes import CAUSES, CLIENT_STALL, UNEXPLAINED
from tpot_locust.metrics.phases import BURST

METRICS: tuple[str, ...] = catalogue.names()  # every metric, in the catalogue's order
PHASE_METRICS: tuple[str, ...] = catalogue.names("phased")
# Metrics whose samples are also kept per cause (``itl@prefill``, ..., ``itl@none``: the
# samples that overlapped no cause), for the report's "Why the tail".
CAUSE_METRICS: tuple[str, ...] = catalogue.names("causes")
# Metrics whose samples are tagged when they overlap a client stall (a copy of each tagged
# sample goes into ``metric@client_stall``; the report sets those aside).
STALL_METRICS: tuple[str, ...] = catalogue.names("stall_tagged")
RECORDED_PHASES = (BURST,)  # steady: the rest (``interference.phase_histogram``)
CAUSE_TAGS = (*CAUSES, UNEXPLAINED)
# Prompt tokens in prefill (of every process's requests) during each token gap.
PREFILL_AT_GAP = catalogue.PREFILL_TOKENS_AT_GAP.name


def phase_metric(metric: str, phase: str) -> str:
    """Histogram name of a metric restricted to one phase or cause, e.g. ``tpot@burst``."""
    return f"{metric}@{phase}"


def stall_spanning(span: str) -> tuple[str, ...]:
    """The stall-tagged metrics whose samples span ``span`` (``catalogue.GAP``, ...)."""
    return tuple(m.name for m in catalogue.CATALOGUE if m.stall_tagged and m.stall_span == span)


def _declared() -> frozenset[str]:
    names = {record.name for record in (*catalogue.CATALOGUE, *catalogue.AUXILIARY)}
    names.update(phase_metric(name, tag) for name in PHASE_METRICS for tag in RECORDED_PHASES)
    names.update(phase_metric(name, tag) for name in CAUSE_METRICS for tag in CAUSE_TAGS)
    names.update(phase_metric(name, CLIENT_STALL) for name in STALL_METRICS)
    return frozenset(names)


DECLARED: frozenset[str] = _declared()


class UndeclaredHistogram(KeyError):
    """A histogram asked for by a name the catalogue does not declare (a misspelling)."""


def check_declared(name: str) -> str:
    if name not in DECLARED:
        raise UndeclaredHistogram(
            f"no histogram {name!r}: common/metric_catalogue.py declares every one"
        )
    return name
