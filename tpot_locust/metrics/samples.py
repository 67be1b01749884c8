"""What each metric's samples are: the code that measures the catalogue's records
(``common.metric_catalogue``), from one request's timings, in ns (the recorder buckets
them in whole microseconds).

Per gap between token events (the ``per_token`` records), a function of the gaps and the
tokens each gap's event carried; per request, the one-sample figures of its first token
and, for a whole request (``recorder``: succeeded, inside the window), of its end.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from tpot_locust.common import metric_catalogue as catalogue
from tpot_locust.common.timings import RequestTimings, to_us, tpot_samples_ns

GapSamples = Callable[[np.ndarray, np.ndarray | None], np.ndarray]


def _gaps(gaps_ns: np.ndarray, tokens: np.ndarray | None) -> np.ndarray:
    return gaps_ns


# Each per-gap metric: its samples (ns) of gaps (ns), given each gap's event's tokens (None:
# one each)
GAP_SAMPLES: dict[str, GapSamples] = {
    catalogue.ITL.name: _gaps,
    catalogue.TPOT.name: tpot_samples_ns,
}


def gap_samples_us(gaps_ns: np.ndarray, tokens: np.ndarray | None) -> dict[str, np.ndarray]:
    """Each per-gap metric's samples of ``gaps_ns``, in us (a metric whose samples are the
    gaps themselves shares their one conversion)."""
    gaps_us = to_us(gaps_ns)
    samples = {}
    for name, of in GAP_SAMPLES.items():
        values = of(gaps_ns, tokens)
        samples[name] = gaps_us if values is gaps_ns else to_us(values)
    return samples


def first_token_scalars(timings: RequestTimings) -> dict[str, float]:
    """The figures of a request's first token (and first answer token), from its send."""
    ttft, ttft_from_intended = timings.ttft_ns, timings.ttft_from_intended_ns
    assert ttft is not None and ttft_from_intended is not None  # a first token (recorder)
    scalars: dict[str, float] = {catalogue.TTFT.name: ttft}
    if (ttfat := timings.ttfat_ns) is not None:
        scalars[catalogue.TTFAT.name] = ttfat
    if timings.scheduled:
        scalars[catalogue.TTFT_FROM_INTENDED.name] = ttft_from_intended
        scalars[catalogue.SCHEDULE_LAG.name] = timings.t_send_ns - timings.t_intended_ns
    return scalars


def whole_scalars(timings: RequestTimings, itl_ns: np.ndarray) -> dict[str, float]:
    """A whole request's one-sample figures (``itl_ns``: its gaps), its pace's apart
    (``fluidity``: the recorder holds the scenario's pace)."""
    scalars = first_token_scalars(timings)
    scalars[catalogue.E2E.name] = timings.e2e_ns
    if itl_ns.size:
        scalars[catalogue.WORST_GAP.name] = int(itl_ns.max())
    if (request_tpot := timings.request_tpot_ns) is not None:
        scalars[catalogue.REQUEST_TPOT.name] = request_tpot
    return scalars
