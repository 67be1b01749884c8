"""Server pauses found from the streams that waited together, and causes named only where
they explain a gap (``metrics.pauses``, ``metrics.explaining``), on made-up gaps."""

from __future__ import annotations

import numpy as np

from tpot_locust.metrics.causes import (
    GPU_THROTTLE,
    KV_OFFLOAD,
    PREEMPTION,
    PREFILL,
    SERVER_GC,
    SERVER_PAUSE,
    CauseTimeline,
    CauseWindow,
    GapCauses,
)
from tpot_locust.metrics.explaining import MIN_LEARNT, GapScale
from tpot_locust.metrics.pauses import HORIZON_NS, PauseFinder

MS = 1_000_000
STEP = 5 * MS


def streams(
    count: int, steps: int, pause_after: int | None = None, pause: int = 40 * MS, offset: int = 0
) -> list[np.ndarray]:
    """``count`` streams of a batched server: a token every ``STEP`` ns to all of them
    (each a few us after the other), one step ``pause`` longer after step ``pause_after``."""
    times = np.arange(steps, dtype=np.int64) * STEP
    if pause_after is not None:
        times[pause_after + 1 :] += pause
    return [offset + times + 7_000 * k for k in range(count)]


def finder_with(tokens: list[np.ndarray]) -> PauseFinder:
    finder = PauseFinder()
    for stamps in tokens:
        finder.add(stamps[:-1], stamps[1:], int(stamps[0]))
    return finder


def test_a_pause_every_stream_waited_through_is_one_window_of_all_of_them() -> None:
    tokens = streams(8, 40, pause_after=20)
    finder = finder_with(tokens)
    found = []
    for stamps in tokens:  # each stream's gaps tagged in turn: the pause found once
        found += finder.find(stamps[:-1], stamps[1:], float(STEP), None)
    assert len(found) == 1
    (window,) = found
    assert window.kind == SERVER_PAUSE and window.size == 8
    # the whole silence: from the last token heard before it to the first after
    assert window.start_wall_ns == int(tokens[-1][20])
    assert window.end_wall_ns == int(tokens[0][21])


def test_one_stream_waiting_while_others_heard_the_server_is_no_pause() -> None:
    tokens = streams(6, 40)
    late = streams(1, 40, pause_after=20)[0] + 3_000  # only this one waited 40 ms
    finder = finder_with([*tokens, late])
    assert finder.find(late[:-1], late[1:], float(STEP), None) == []


def test_a_client_stall_is_not_a_server_pause_unless_kernel_stamps_kept_the_gaps_true() -> None:
    tokens = streams(8, 40, pause_after=20)
    moved = np.zeros(39, dtype=bool)
    moved[20] = True  # our loop was held over that gap, whose stamps are its reads'
    assert finder_with(tokens).find(tokens[0][:-1], tokens[0][1:], float(STEP), moved) == []
    kept = np.zeros(39, dtype=bool)  # the same silence, stamped by the kernel: the server's
    assert len(finder_with(tokens).find(tokens[0][:-1], tokens[0][1:], float(STEP), kept)) == 1


def test_pruned_gaps_leave_the_counts_of_later_ones_right() -> None:
    early = streams(8, 40)
    later = streams(8, 40, pause_after=20, offset=int(early[0][-1]) + 10 * STEP)
    finder = finder_with([*early, *later])
    finder.prune(int(later[0][0]), int(later[0][-1]))  # every early gap ended before it
    (window,) = finder.find(later[0][:-1], later[0][1:], float(STEP), None)
    assert window.size == 8


def test_what_is_kept_reaches_back_a_bounded_time() -> None:
    tokens = streams(8, 40, pause_after=20)
    finder = finder_with(tokens)
    finder.prune(0, int(tokens[-1][-1]) + HORIZON_NS + 1)  # ten seconds on: all forgotten
    assert finder.find(tokens[0][:-1], tokens[0][1:], float(STEP), None) == []
    assert finder._ends.size == 0 and finder._arrivals.size == 0


def learnt_scale(ns_per_token: float) -> GapScale:
    """A scale that saw plain 5 ms steps and prefill steps of ``ns_per_token`` per token."""
    scale = GapScale()
    plain = np.full(10 * MS, STEP, dtype=np.int64)[: 4 * MIN_LEARNT]
    tokens = np.zeros(plain.size, dtype=np.int64)
    tokens[::3] = 64  # a third of the gaps overlapped a 64-token prompt, which stretched them
    gaps = plain + np.rint(tokens * ns_per_token).astype(np.int64)
    scale.learn_steps(gaps)
    scale.learn_prefill(gaps, tokens)
    return scale


def causes(
    tokens: list[int], pause_streams: list[int], extra: dict[str, list[bool]] | None = None
) -> GapCauses:
    prefill = np.array(tokens, dtype=np.int64)
    masks = {PREFILL: prefill > 0} | {k: np.array(v) for k, v in (extra or {}).items()}
    return GapCauses(
        masks,
        prefill,
        (prefill > 0).astype(np.int64),
        np.zeros(prefill.size, dtype=bool),
        np.array(pause_streams),
    )


def test_prefill_is_named_where_it_explains_and_a_pause_where_it_does() -> None:
    scale = learnt_scale(24_000)  # 24 us a prompt token: 64 tokens add 1.5 ms
    assert scale.ns_per_prompt_token is not None
    assert abs(scale.ns_per_prompt_token - 24_000) < 2_000
    gaps = np.array([45, 45, 6.6, 205, 45], dtype=np.float64) * MS
    found = causes([128, 0, 64, 8192, 8192], [30, 30, 0, 30, 30])
    covered = np.array([40, 40, 0, 40, 30], dtype=np.int64) * MS
    scale.weigh(gaps, found, covered)
    # a 40 ms pause with two small prompts beside it: the pause, not the prefill
    # a plain prefill step: prefill; a long prefill step every stream waited through too:
    # prefill only; a pause beside a long prefill that explains it too: both
    assert found.masks[PREFILL].tolist() == [False, False, True, True, True]
    assert found.masks[SERVER_PAUSE].tolist() == [True, True, False, False, False]


def test_no_pause_is_named_where_the_server_counted_preemptions() -> None:
    scale = learnt_scale(24_000)
    found = causes([0, 0], [30, 30], {PREEMPTION: [True, False]})
    covered = np.array([40, 40], dtype=np.int64) * MS
    scale.weigh(np.array([45, 45], dtype=np.float64) * MS, found, covered)
    assert found.masks[SERVER_PAUSE].tolist() == [False, True]


def test_a_short_pause_inside_a_long_wait_does_not_explain_it() -> None:
    scale = learnt_scale(24_000)
    found = causes([0], [30])
    scale.weigh(np.array([500 * MS], dtype=np.float64), found, np.array([30 * MS]))
    assert SERVER_PAUSE not in found.masks


def test_before_it_has_learnt_prefill_explains_what_it_overlaps() -> None:
    scale = GapScale()
    found = causes([64, 0], [30, 30])
    scale.weigh(np.array([45, 45], dtype=np.float64) * MS, found, np.array([40, 40]) * MS)
    assert found.masks[PREFILL].tolist() == [True, False]
    assert found.masks[SERVER_PAUSE].tolist() == [False, True]


def test_pause_windows_of_every_process_sum_their_streams_and_cover_a_gap() -> None:
    timeline = CauseTimeline()
    timeline.add(CauseWindow(SERVER_PAUSE, "pause:a:0", 100 * MS, 140 * MS, 2.0))
    timeline.add(CauseWindow(SERVER_PAUSE, "pause:b:0", 101 * MS, 139 * MS, 2.0))
    starts = np.array([95, 0]) * MS
    ends = np.array([145, 50]) * MS
    found = timeline.tags(starts, ends)
    assert found.pause_streams.tolist() == [4, 0]
    covered = timeline.longest_overlap(SERVER_PAUSE, starts, ends, found.pause_streams > 0)
    assert covered.tolist() == [40 * MS, 0]


def test_a_silence_the_server_counted_kv_loaded_back_in_is_that_swap_in_not_a_pause() -> None:
    scale = learnt_scale(24_000)
    gaps = np.array([12, 12, 600], dtype=np.float64) * MS
    found = causes(
        [0, 0, 0], [30, 30, 1], {KV_OFFLOAD: [True, False, True], SERVER_GC: [False, True, False]}
    )
    covered = np.array([7, 7, 7], dtype=np.int64) * MS
    scale.weigh(gaps, found, covered)
    # every stream waited 7 ms: a swap-in where KV came back, a GC (and a pause) where the
    # server collected; a lone stream's 600 ms wait is neither (its preemption is)
    assert found.masks[KV_OFFLOAD].tolist() == [True, False, False]
    assert found.masks[SERVER_GC].tolist() == [False, True, False]
    assert found.masks[SERVER_PAUSE].tolist() == [False, True, False]


def test_once_learnt_a_prompt_counts_as_in_prefill_only_at_the_end_of_its_window() -> None:
    timeline = CauseTimeline()
    # sent at 0, queued behind a full KV cache, first token at 1 s: 100 tokens
    timeline.add(CauseWindow(PREFILL, "r1", 0, 1000 * MS, 100.0))
    early, late = np.array([100 * MS, 990 * MS]), np.array([105 * MS, 996 * MS])
    assert timeline.tags(early, late).prefill_tokens.tolist() == [100, 100]
    timeline.prefill_span_ns_per_token = 50_000.0  # 100 tokens: its last 5 ms
    assert timeline.tags(early, late).prefill_tokens.tolist() == [0, 100]
    scale = learnt_scale(24_000)
    assert scale.prefill_span() == 48_000.0  # twice the cost learnt, 3 digits


def test_a_throttled_prefill_step_is_throttling_and_prefill_not_a_pause() -> None:
    """The GPU held to 1/1.6 of its clock slows the whole step, its prefill work too: an 8k
    prompt's 200 ms prefill then takes 320 ms, and every stream waits through it."""
    scale = learnt_scale(24_000)
    plain, prefill = STEP, 8192 * 24_000
    gaps = np.array([1.6 * (plain + prefill), 1.6 * plain + 40 * MS], dtype=np.float64)
    found = causes([8192, 0], [30, 30], {GPU_THROTTLE: [True, True]})
    scale.weigh(gaps, found, np.array([gaps[0] * 0.9, 40 * MS]), slowdown=np.array([0.6, 0.6]))
    # throttling is named by what it adds to a plain step (3 ms of a 320 ms prefill step, of
    # a 40 ms pause): its DCGM window may reach past the episode
    assert found.masks[PREFILL].tolist() == [True, False]
    assert GPU_THROTTLE not in found.masks
    assert found.masks[SERVER_PAUSE].tolist() == [False, True]
