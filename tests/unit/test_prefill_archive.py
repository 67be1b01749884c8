"""The prefill archive (``metrics.causes.PrefillArchive``): the prompt tokens in prefill
over a run as the report's series draws them, against brute force, peaks and shared edges
included."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from tpot_locust.metrics.causes import PREFILL, CauseWindow, PrefillArchive

EPOCH_NS = 1_700_000_000_000_000_000  # wall-clock ns of today: int64 arithmetic near its top


def prefill(window_id: str, start: int, end: int | None, size: float = 100.0) -> CauseWindow:
    return CauseWindow(PREFILL, window_id, start, end, size)


def level_at(windows: list[tuple[int, int, float]], t: int) -> float:
    """Prompt tokens in prefill at instant ``t`` (each window is [start, end))."""
    return sum(size for start, end, size in windows if start <= t < end)


def archive_of(windows: list[tuple[int, int, float]]) -> PrefillArchive:
    archive = PrefillArchive()
    for number, (start, end, size) in enumerate(windows):
        archive.add(prefill(f"w{number}", start, end, size))
    return archive


def test_a_short_long_prompt_among_long_small_ones_shows_its_peak() -> None:
    s = 1_000_000_000
    origin = EPOCH_NS
    # 40 small prompts of 100 tokens, each 20.5 s long, staggered over 40 s (no two edges
    # touch); one 16k prompt in prefill for 3 ms at 30.3 s, far
    # narrower than a bin (59.5 s / 100 points ~ 0.6 s)
    small = [(origin + i * s, origin + i * s + 20 * s + s // 2, 100.0) for i in range(40)]
    long_at = origin + 30 * s + 3 * s // 10
    windows = [*small, (long_at, long_at + 3_000_000, 16_000.0)]
    series = archive_of(windows).tokens_series(origin, points=100)
    assert len(series) <= 100
    peak_time, peak = max(series, key=lambda point: point[1])
    small_then = level_at(small, long_at)
    assert small_then == 2100  # prompts 10..30 are running then
    assert peak == 16_000 + small_then
    assert peak_time <= 30.3 < peak_time + 0.6  # its bin, in seconds from the origin
    # every other point stays at the small prompts' level
    small_peak = max(level_at(small, start) for start, _, _ in small)
    assert max(value for _, value in series if value != peak) <= small_peak


def test_series_times_are_seconds_from_the_origin() -> None:
    s = 1_000_000_000
    origin = EPOCH_NS
    windows = [(origin + 5 * s, origin + 7 * s, 10.0), (origin + 12 * s, origin + 15 * s, 20.0)]
    series = archive_of(windows).tokens_series(origin, points=10)  # bins of 1 s
    assert series[0] == [5.0, 10]
    times = [time for time, _ in series]
    assert times == sorted(times) and len(set(times)) == len(times)
    assert all(5.0 <= time < 15.0 for time in times)
    assert dict(series)[12.0] == 20
    # another origin shifts the times only
    shifted = archive_of(windows).tokens_series(origin - 2 * s, points=10)
    assert [[round(t - 2.0, 3), v] for t, v in shifted] == series
    assert json.loads(json.dumps(series)) == series
    assert PrefillArchive().tokens_series(origin) == []


unique_windows = st.lists(
    st.tuples(st.integers(1, 40), st.integers(0, 20_000)), min_size=1, max_size=30
).flatmap(
    lambda shapes: st.lists(
        st.integers(0, 10**6), min_size=2 * len(shapes), max_size=2 * len(shapes), unique=True
    ).map(
        lambda edges: [
            (min(a, b), max(a, b), float(size))
            for (a, b), (_, size) in zip(
                zip(edges[::2], edges[1::2], strict=True), shapes, strict=True
            )
        ]
    )
)


@settings(max_examples=150, deadline=None)
@given(windows=unique_windows, points=st.integers(1, 50))
def test_series_against_brute_force_with_distinct_edges(
    windows: list[tuple[int, int, float]], points: int
) -> None:
    windows = [(start * 1000, end * 1000, size) for start, end, size in windows]  # us apart
    origin = EPOCH_NS
    windows = [(origin + start, origin + end, size) for start, end, size in windows]
    series = archive_of(windows).tokens_series(origin, points=points)
    assert 1 <= len(series) <= points
    edges = sorted({t for start, end, _ in windows for t in (start, end)})
    levels = {round(level_at(windows, t)) for t in edges}  # what was ever in prefill at once
    assert max(value for _, value in series) == max(levels)  # the run's peak is kept
    assert all(value in levels for _, value in series)  # and nothing never seen at once
    times = [time for time, _ in series]
    assert times == sorted(times)
    low, high = (edges[0] - origin) / 1e9, (edges[-1] - origin) / 1e9
    assert low - 0.001 <= times[0] <= times[-1] <= high + 0.001


def test_touching_windows_never_add_up() -> None:
    windows = [(0, 100, 16_000.0), (100, 200, 16_000.0)]  # the second starts as the first ends
    series = archive_of(windows).tokens_series(0, points=10)
    assert max(value for _, value in series) == 16_000


@settings(max_examples=150, deadline=None)
@given(
    windows=st.lists(
        st.tuples(st.integers(0, 30), st.integers(1, 10), st.integers(0, 20_000)),
        min_size=1,
        max_size=25,
    ),
    points=st.integers(1, 40),
)
def test_series_with_shared_edges_keeps_the_true_peak(
    windows: list[tuple[int, int, int]], points: int
) -> None:
    spans = [
        (EPOCH_NS + s * 10**6, EPOCH_NS + (s + n) * 10**6, float(size)) for s, n, size in windows
    ]
    series = archive_of(spans).tokens_series(EPOCH_NS, points=points)
    levels = {round(level_at(spans, start)) for start, _, _ in spans}
    levels |= {round(level_at(spans, end)) for _, end, _ in spans}
    # the peak is kept and never exceeded (windows ending together may show a bin part way
    # down: a level between two real ones, never above them)
    assert max(value for _, value in series) == max(levels) and len(series) <= points
