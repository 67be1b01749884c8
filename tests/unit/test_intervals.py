"""A percentile's 95 % interval from a run's time sections (``metrics.intervals``): it
covers the server's percentile as often as it says where gaps come in correlated episodes
(a burst stretches every stream's gaps at once), where an interval that counts gaps does
not; it says "not measured" where a section holds too few samples above the percentile;
and ``compare`` judges a change by its interval."""

from __future__ import annotations

import numpy as np
import pytest

from tpot_locust.metrics.histograms import histogram_stats, new_histogram, record_many
from tpot_locust.metrics.intervals import MIN_SECTIONS, percentile_interval, sections_of
from tpot_locust.report.compare import compare_summaries

SLICES = 12  # a 12 s run, one histogram a second
GAPS_A_SLICE = 2000


def _run(rng: np.random.Generator, bursty: bool) -> list[np.ndarray]:
    """One run's gaps (us) a second: lognormal around 2 ms; bursty, every second holds a
    burst with probability 1/3 that stretches 5 % of that second's gaps to ~15 ms, all
    at once: the tail's events come in episodes, not gap by gap."""
    slices = []
    for _ in range(SLICES):
        gaps = rng.lognormal(np.log(2000), 0.5, GAPS_A_SLICE)
        if bursty and rng.random() < 1 / 3:
            stretched = rng.random(GAPS_A_SLICE) < 0.05
            gaps[stretched] = rng.lognormal(np.log(15000), 0.2, int(stretched.sum()))
        slices.append(gaps.astype(np.int64))
    return slices


def _histograms(slices: list[np.ndarray]) -> list:
    histograms = []
    for gaps in slices:
        histogram = new_histogram()
        record_many(histogram, gaps)
        histograms.append(histogram)
    return histograms


def _naive(gaps: np.ndarray, percentile: float) -> tuple[float, float]:
    """The binomial order-statistic interval, as if every gap were independent."""
    ordered, n, q = np.sort(gaps), gaps.size, percentile / 100
    spread = 1.96 * np.sqrt(n * q * (1 - q))
    low, high = int(max(n * q - spread, 0)), int(min(n * q + spread, n - 1))
    return float(ordered[low]), float(ordered[high])


@pytest.mark.parametrize("percentile", [50.0, 90.0])
def test_sections_cover_a_bursty_servers_percentile_where_counting_gaps_does_not(
    percentile: float,
) -> None:
    rng = np.random.default_rng(55)
    runs = [_run(rng, bursty=True) for _ in range(60)]
    population = np.percentile(np.concatenate([np.concatenate(run) for run in runs]), percentile)
    ours = naive = 0
    for run in runs:
        histograms = _histograms(run)
        whole = new_histogram()
        for histogram in histograms:
            whole.add(histogram)
        value = histogram_stats(whole, (percentile,)).percentiles[percentile]
        interval = percentile_interval(histograms, percentile, value, float(SLICES))
        assert interval.measured, interval
        assert interval.low_ms is not None and interval.high_ms is not None
        ours += interval.low_ms * 1000 <= population <= interval.high_ms * 1000
        low, high = _naive(np.concatenate(run), percentile)
        naive += low <= population <= high
    assert ours >= 0.85 * len(runs), (ours, naive)  # 95 % nominal; 60 runs, and HDR's 0.1 %
    if percentile >= 90:  # where the bursts decide the percentile
        assert naive <= 0.7 * len(runs), (ours, naive)


def test_a_percentile_that_sits_on_a_few_bursts_is_not_measured() -> None:
    """The same 1.5 % of long gaps: from 3 bursts of 12 seconds, P99 sits on three episodes
    (not measured, with how much longer); spread over every second, it gets an interval."""
    rng = np.random.default_rng(56)
    for bursty in (True, False):
        slices = []
        for second in range(SLICES):
            gaps = rng.lognormal(np.log(2000), 0.3, GAPS_A_SLICE)
            if not bursty or second in (2, 6, 10):
                share = 0.06 if bursty else 0.015  # ~360 long gaps either way
                long = rng.random(GAPS_A_SLICE) < share
                gaps[long] = rng.lognormal(np.log(15000), 0.2, int(long.sum()))
            slices.append(gaps.astype(np.int64))
        histograms = _histograms(slices)
        whole = new_histogram()
        for histogram in histograms:
            whole.add(histogram)
        value = histogram_stats(whole, (99.0,)).percentiles[99.0]
        interval = percentile_interval(histograms, 99.0, value, float(SLICES))
        if bursty:
            assert not interval.measured, interval
            assert "of 12 sections" in (interval.why_not or "")
            assert interval.longer_s is not None and interval.longer_s > 0
        else:
            assert interval.measured, interval


def test_a_tail_with_too_few_samples_a_section_is_not_measured() -> None:
    rng = np.random.default_rng(1)
    histograms = _histograms(_run(rng, bursty=False))  # 24,000 gaps: 2.4 above P99.99
    interval = percentile_interval(histograms, 99.99, 20_000.0, float(SLICES))
    assert not interval.measured and interval.why_not is not None
    assert interval.longer_s is not None and interval.longer_s > 0
    few = percentile_interval(histograms[: MIN_SECTIONS - 1], 50.0, 2000.0, 4.0)
    assert not few.measured and "report intervals" in (few.why_not or "")


def test_sections_are_contiguous_and_whole() -> None:
    rng = np.random.default_rng(2)
    histograms = _histograms(_run(rng, bursty=False))
    parts = sections_of(histograms, 5)
    assert len(parts) == 5
    assert sum(p.total_count for p in parts) == SLICES * GAPS_A_SLICE


def _summary(value: float, half: float) -> dict:
    figures = {"count": 10_000, "above": {"p50": 5000}, "p50": value}
    figures["ci95"] = {"p50": [value - half, value + half]}
    return {"metrics": {"tpot": figures}}


@pytest.mark.parametrize(
    ("candidate", "half", "verdict"),
    [
        (1.10, 0.01, "regressed"),  # +10 %, +-1 %: wholly above 3 %
        (1.00, 0.01, "within"),
        (0.90, 0.01, "improved"),
        (1.03, 0.02, "inconclusive"),  # straddles 3 %
    ],
)
def test_compare_judges_a_change_by_its_interval(
    candidate: float, half: float, verdict: str
) -> None:
    result = compare_summaries(
        _summary(1.0, half), _summary(candidate, half), ("tpot",), ("p50",), 0.03
    )
    (row,) = result.rows
    assert row.verdict == verdict, row
    assert row.regressed is (verdict == "regressed")
    assert row.ci95 is not None and row.ci95[0] < row.change < row.ci95[1]  # type: ignore[operator]
    if verdict == "inconclusive":
        assert row.longer is not None and row.longer > 1


def test_a_wider_family_of_figures_widens_each_change_interval() -> None:
    """Bonferroni: ten figures judged together each get a wider interval than one alone."""
    one = compare_summaries(_summary(1.0, 0.02), _summary(1.05, 0.02), ("tpot",), ("p50",), 0.03)
    base = _summary(1.0, 0.02)
    candidate = _summary(1.05, 0.02)
    for summary in (base, candidate):
        figures = summary["metrics"]["tpot"]
        for key in ("p90", "p99"):
            figures[key] = figures["p50"]
            figures["above"][key] = 100
            figures["ci95"][key] = list(figures["ci95"]["p50"])
    many = compare_summaries(base, candidate, ("tpot",), ("p50", "p90", "p99"), 0.03)
    (alone,) = one.rows
    assert alone.ci95 is not None and many.rows[0].ci95 is not None
    assert many.rows[0].ci95[1] - many.rows[0].ci95[0] > alone.ci95[1] - alone.ci95[0]


def test_runs_scatter_more_than_one_run_says_only_past_the_chi_square_line() -> None:
    from tpot_locust.report.repeats import scatters_more

    assert not scatters_more(1.0, 1.0, 3)  # as one run says
    assert not scatters_more(1.6, 1.0, 3)  # 2 x 2.56 = 5.1 < 5.99
    assert scatters_more(1.8, 1.0, 3)  # 6.5 > 5.99
    assert scatters_more(1.3, 1.0, 30)  # 29 x 1.69 = 49 > 42.6
    assert not scatters_more(1.0, 0.0, 3)


def test_a_figure_without_an_interval_where_its_runs_make_them_is_inconclusive() -> None:
    """A tail not measured (or an interval clipped at 0) is not judged by its value alone:
    that is where noise is largest (+20 % here)."""
    base, candidate = _summary(1.0, 0.01), _summary(1.2, 0.01)
    candidate["metrics"]["tpot"]["ci95"]["p50"] = None
    (row,) = compare_summaries(base, candidate, ("tpot",), ("p50",), 0.03).rows
    assert row.verdict == "inconclusive" and row.regressed is False
    clipped = _summary(1.2, 0.01)
    clipped["metrics"]["tpot"]["ci95"]["p50"] = [0.0, 2.4]
    (row,) = compare_summaries(base, clipped, ("tpot",), ("p50",), 0.03).rows
    assert row.verdict == "inconclusive" and row.regressed is False


def test_a_damaged_interval_log_is_a_slice_fewer_never_an_error(tmp_path) -> None:  # noqa: ANN001
    from tpot_locust.common.run_facts import RunFacts
    from tpot_locust.report.run_intervals import read_slices

    histogram = new_histogram()
    record_many(histogram, np.full(100, 2000, dtype=np.int64))
    good = histogram.encode().decode()
    lines = [
        "#[StartTime: 100.000 (seconds since epoch), x]",
        f"0.000,1.000,2.0,{good}",
        f"inf,1.000,2.0,{good}",
        f"1.000,nan,2.0,{good}",
        "2.000,1.000,2.0,not-base64",
        "3.000,1.000",
        f"4.000,1.000,2.0,{good}",
    ]
    path = tmp_path / "tpot.hlog"
    path.write_text("\n".join(lines) + "\n")
    run = RunFacts(window_wall_ns=[100 * 10**9, 106 * 10**9])
    slices, window_s = read_slices(path, run)
    assert sum(s.total_count for s in slices) == 200 and window_s == 6.0
    path.write_text("#[StartTime: abc (seconds since epoch), x]\n" + f"0.000,1.000,2.0,{good}\n")
    assert read_slices(path, run) == ([], 6.0)


def test_the_sure_knee_is_where_an_interval_first_reaches_a_limit() -> None:
    from tpot_locust.report.sweep_results import sure_knee

    limits = [{"metric": "tpot", "statistic": "p99", "limit": 55.0}]
    rows = [
        {"step": 1, "value": 4, "verdict": "pass", "tpot": {"p99": 20, "ci95": {"p99": [18, 22]}}},
        {"step": 2, "value": 8, "verdict": "pass", "tpot": {"p99": 40, "ci95": {"p99": [35, 45]}}},
        {"step": 3, "value": 16, "verdict": "pass", "tpot": {"p99": 52, "ci95": {"p99": [48, 57]}}},
        {"step": 4, "value": 32, "verdict": "fail", "tpot": {"p99": 70, "ci95": {"p99": [60, 80]}}},
    ]
    assert sure_knee(rows, limits) == {"step": 2, "value": 8}  # step 3's reaches 57 > 55
    rows[0]["tpot"]["ci95"]["p99"] = None  # not measured: not sure
    assert sure_knee(rows, limits) is None


def test_a_mean_or_max_is_judged_by_its_value_beside_intervals() -> None:
    base, candidate = _summary(1.0, 0.01), _summary(1.0, 0.01)
    base["metrics"]["tpot"]["max"], candidate["metrics"]["tpot"]["max"] = 10.0, 12.0
    (row,) = compare_summaries(base, candidate, ("tpot",), ("max",), 0.03).rows
    assert row.verdict == "regressed" and row.regressed and row.ci95 is None


def test_a_running_tests_sections_stay_bounded_and_lose_no_sample() -> None:
    """The live tab's sections (``metrics.live_sections``): 2 x SECTIONS blocks at most,
    merged pairwise as the test grows, every sample of every interval kept, each scope's
    blocks aligned; its intervals those of the finished run's sections, near enough."""
    from tpot_locust.metrics.live_sections import MAX_BLOCKS, LiveSections, _unpacked
    from tpot_locust.metrics.metric_set import MetricSet

    rng = np.random.default_rng(57)
    sections = LiveSections(("tpot",))
    slices = [gaps for _ in range(6) for gaps in _run(rng, bursty=False)][:61]
    for index, gaps in enumerate(slices):
        interval = MetricSet()
        record_many(interval.for_group("a").histogram("tpot"), gaps)
        if index % 2:  # class b reports every other interval only
            record_many(interval.for_group("b").histogram("tpot"), gaps[:100])
        sections.add(interval.combined(), interval.by_class())
        assert len(sections._full[(None, "tpot")]) < MAX_BLOCKS
        assert len({len(blobs) for blobs in sections._full.values()}) <= 1  # aligned
    assert sections.width == 4  # 24 blocks of 1, then of 2, now 15 of 4 and one under way
    whole = new_histogram()
    for histogram in _histograms(slices):
        whole.add(histogram)
    figures = histogram_stats(whole, (50.0, 99.0, 99.99)).percentiles
    live = sections.intervals(None, "tpot", figures)
    finished = {p: percentile_interval(_histograms(slices), p, v, 61.0) for p, v in figures.items()}
    for percentile in (50.0, 99.0):
        ours, theirs = live[percentile], finished[percentile]
        assert ours.measured and theirs.measured and ours.sections == theirs.sections == 12
        assert ours.low_ms is not None and theirs.low_ms is not None
        assert ours.low_ms * 1000 <= figures[percentile] <= ours.high_ms * 1000  # type: ignore[operator]
        half, their_half = ours.high_ms - ours.low_ms, theirs.high_ms - theirs.low_ms  # type: ignore[operator]
        assert 0.3 * their_half <= half <= 3 * their_half  # other sections, the same spread
    # read again before a block closed: the same spread, around the figure now
    moved = sections.intervals(None, "tpot", {**figures, 50.0: figures[50.0] + 100})[50.0]
    assert moved.low_ms == pytest.approx(live[50.0].low_ms + 0.1, abs=2e-4)  # type: ignore[operator]
    assert moved.high_ms == pytest.approx(live[50.0].high_ms + 0.1, abs=2e-4)  # type: ignore[operator]
    kept = sections.intervals("b", "tpot", {50.0: 2000.0})[50.0]
    assert kept.sections >= 5  # class b's blocks: every other interval, none lost
    full = [_unpacked(block) for block in sections._full[(None, "tpot")] if block]
    total = sum(int(counts.sum()) for _, counts in full)
    total += sections._open[(None, "tpot")].total_count
    assert total == sum(gaps.size for gaps in slices) + 30 * 100
    # class a alone in half the intervals: every one of them is still its own
    own = [_unpacked(block) for block in sections._full[("a", "tpot")] if block]
    own_total = sum(int(counts.sum()) for _, counts in own)
    assert own_total + sections._open[("a", "tpot")].total_count == sum(g.size for g in slices)


def test_the_tpot_tab_shows_each_percentiles_interval_below_its_figures() -> None:
    from types import SimpleNamespace

    from tpot_locust.harness.web.web_tab import tab_rows
    from tpot_locust.metrics.collector import INTERVAL_METRICS
    from tpot_locust.metrics.live_sections import LiveSections
    from tpot_locust.metrics.metric_set import MetricSet

    rng = np.random.default_rng(58)
    totals, sections = MetricSet(), LiveSections(INTERVAL_METRICS)
    for gaps in _run(rng, bursty=False):
        interval = MetricSet()
        record_many(interval.for_group("chat").histogram("tpot"), gaps)
        totals.add(interval)
        sections.add(interval.combined(), interval.by_class())
    state = SimpleNamespace(collector=SimpleNamespace(totals=totals, sections=sections))
    rows = {row["metric"]: row for row in tab_rows(state)}  # type: ignore[arg-type]
    figures, shown = rows["TPOT"], rows["TPOT 95% interval"]
    low, high = (float(bound) for bound in shown["p50"].split("-"))
    assert low < float(figures["p50"]) < high and shown["name"] == "chat"
    assert shown["p99.99"] == "not measured" and shown["count"] == shown["max"] == ""
