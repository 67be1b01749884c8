"""Overlap is not cause: which of the windows a token gap overlapped can account for it.

A prompt in prefill somewhere in the run overlaps most gaps of a busy server, yet a
64-token prefill cannot stretch a gap by 40 ms. So this process learns from its own gaps
what a plain step takes (``base_ns``: the median gap) and what a prompt token in prefill
adds to a gap (``ns_per_prompt_token``: a high quantile, ``COST_QUANTILE``, of a gap's
excess over the plain step per prompt token overlapping it, over the recent gaps that
overlapped any; the quantile is taken because most such gaps hold only the queueing part of
a prefill window, and it stays below the rare gaps something else stretched). Then, per gap:

- what prefill can account for is ``min(ns_per_prompt_token x prompt tokens, excess)``;
- ``prefill`` is named where that is at least ``EXPLAINS_SHARE`` of the gap's excess (a gap
  with no excess keeps every prefill it overlapped: nothing to explain, nothing to refute);
- ``server_pause`` (a *silence*) is named where pause windows (``metrics.pauses``) held at least
  ``PAUSE_MIN_STREAMS`` streams, one of them covered at least that share of the excess (a
  preempted stream's long wait is not the short pause it overlapped), and what prefill
  leaves unexplained is at least that share too (a long prefill step is a silence of every
  stream as well), and the server counted no preemption over the gap (its recompute is a
  silence of every stream too, and is ``preemption``'s); a pause beside a big enough prefill
  is named with both;
- ``kv_offload`` (the server's count of KV moved to CPU memory or back from it rose over the gap)
  is named for such a silence instead of ``server_pause``: the transfer held the step (a
  preempted stream's own long wait is ``preemption``'s, not the transfer's);
- ``server_gc`` (its count of full collections rose over the gap, a window as wide as its
  metrics' sampling) is named for such a silence, beside ``server_pause``: a collection is
  a pause of the server's process (a non-GC pause in the same sampling interval is named
  a GC too: the counter says no more);
- ``gpu_throttle`` (a GPU's clocks were held down then, by a slowdown ``s``: steps ``1 + s``
  times as long) where what it adds to a plain step, ``s x`` the plain step, is at least
  that share of the excess (a 40 ms pause in a throttled second is still a pause); a
  silence it accounts for, with the prefill work it slowed (``s x`` that too), is no pause.

Until ``MIN_LEARNT`` gaps that overlapped a prefill were seen, prefill explains what it
overlaps (as it did before this module), and a pause is named only beside no prefill.
Once learnt, a prompt counts as in prefill only over the end of its window, ``SPAN_MARGIN``
times what its tokens should take (``prefill_span``): before that it was queued, and a
prompt waiting behind a full KV cache explains nobody's gap.
"""

from __future__ import annotations

import numpy as np

from tpot_locust.metrics.causes import (
    GPU_THROTTLE,
    KV_OFFLOAD,
    PAUSE_MIN_STREAMS,
    PREEMPTION,
    PREFILL,
    SERVER_GC,
    SERVER_PAUSE,
    GapCauses,
    explains,
)

COST_QUANTILE = 90.0
SPAN_MARGIN = 2.0  # a prompt's prefill is counted over twice what its tokens should take
KEPT = 32_768  # recent samples each estimate is taken over
PER_BATCH = 4_096  # at most this many samples of one batch are learnt from (evenly spread)
MIN_LEARNT = 200


class _Recent:
    """The last ``KEPT`` values, in a ring."""

    def __init__(self) -> None:
        self.values = np.zeros(KEPT, dtype=np.float64)
        self.filled = 0
        self._next = 0

    def add(self, values: np.ndarray) -> None:
        if values.size > PER_BATCH:
            values = values[:: -(-values.size // PER_BATCH)]
        end = self._next + values.size
        if end <= KEPT:
            self.values[self._next : end] = values
        else:
            split = KEPT - self._next
            self.values[self._next :] = values[:split]
            self.values[: values.size - split] = values[split:]
        self._next = end % KEPT
        self.filled = min(self.filled + values.size, KEPT)

    def percentile(self, q: float) -> float:
        return float(np.percentile(self.values[: self.filled], q))


class GapScale:
    """This process's plain step and prefill cost per prompt token, from its own gaps."""

    def __init__(self, learning: bool = True) -> None:
        self._gaps = _Recent()
        self._ratios = _Recent()  # excess ns per prompt token, of gaps that overlapped any
        self.base_ns = 0.0
        self.ns_per_prompt_token: float | None = None  # None: not learnt yet
        self.learning = learning  # False: overlap is taken for cause (a test's brute force)

    def learn_steps(self, itl_ns: np.ndarray) -> None:
        """Take a batch's gaps (ns) into the plain step (before pauses are looked for)."""
        if itl_ns.size and self.learning:
            self._gaps.add(itl_ns.astype(np.float64))
            self.base_ns = self._gaps.percentile(50.0)

    def learn_prefill(self, itl_ns: np.ndarray, prefill_tokens: np.ndarray) -> None:
        """Take the same gaps with the prompt tokens in prefill over each."""
        if not itl_ns.size or not self.learning:
            return
        overlapped = prefill_tokens > 0
        if overlapped.any():
            excess = np.maximum(itl_ns[overlapped] - self.base_ns, 0.0)
            self._ratios.add(excess / prefill_tokens[overlapped])
        if self._ratios.filled >= MIN_LEARNT:
            self.ns_per_prompt_token = self._ratios.percentile(COST_QUANTILE)

    def prefill_span(self) -> float | None:
        """ns a prompt token of a prefill window counts for, back from its first token
        (``CauseTimeline.prefill_span_ns_per_token``), 3 digits; None before it is learnt."""
        cost = self.ns_per_prompt_token
        return None if not cost else float(f"{cost * SPAN_MARGIN:.3g}")

    def weigh(
        self,
        itl_ns: np.ndarray,
        found: GapCauses,
        paused_ns: np.ndarray,
        slowdown: np.ndarray | None = None,
    ) -> None:
        """Keep ``prefill`` where it explains the gap and name ``server_pause`` where a
        pause does (``paused_ns``: how much of each gap the longest pause window covered),
        ``gpu_throttle`` where a GPU's slowdown does (``slowdown``: the largest of the
        throttle windows it overlapped, 0.6 for steps 1.6x as long), in ``found.masks``
        (overlap in, cause out)."""
        masks = found.masks
        excess = np.maximum(itl_ns - self.base_ns, 0.0)
        tokens = found.prefill_tokens
        if self.ns_per_prompt_token is None:
            prefill_part = np.where(tokens > 0, excess, 0.0)
        else:
            prefill_part = np.minimum(self.ns_per_prompt_token * tokens, excess)
        if PREFILL in masks:
            named = masks[PREFILL] & ((excess == 0) | explains(prefill_part, excess))
            masks[PREFILL] = named
        slowed = np.zeros(excess.shape)  # what lowered clocks added to the whole step
        if slowdown is not None and GPU_THROTTLE in masks:  # a plain step, that much longer
            masks[GPU_THROTTLE] &= explains(np.minimum(self.base_ns * slowdown, excess), excess)
            # the step's prefill work is slowed as much: a throttled 8k prefill left 0.6 of
            # it unexplained, a silence named a pause (CI, 12 gaps). Not what names
            # throttling: a DCGM window reaches up to a sample past the episode, and a
            # prefill step there would be called throttled
            slowed = np.minimum(slowdown * (self.base_ns + prefill_part), excess)
        silence = found.pause_streams >= PAUSE_MIN_STREAMS  # every stream waited it out
        if silence.any():
            unexplained = excess - prefill_part - slowed  # a slow step is a silence too
            silence &= explains(np.minimum(paused_ns, excess), excess)
            silence &= explains(unexplained, excess)
        # a silence while the server counted KV moved to or from CPU memory is that transfer;
        # while it counted preemptions, a recompute's; else it paused
        pause = silence.copy()
        if KV_OFFLOAD in masks:
            masks[KV_OFFLOAD] &= silence
            pause &= ~masks[KV_OFFLOAD]
        if PREEMPTION in masks:
            pause &= ~masks[PREEMPTION]
        masks[SERVER_PAUSE] = pause
        if SERVER_GC in masks:  # a collection counted then, and every stream waited it out
            masks[SERVER_GC] &= silence
        for kind in (PREFILL, SERVER_PAUSE, SERVER_GC, KV_OFFLOAD, GPU_THROTTLE):
            if kind in masks and not masks[kind].any():
                del masks[kind]
