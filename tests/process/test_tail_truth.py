"""The far tail against the simulator's truth over whole runs (start, bursts and stop), and
the client stall detector: every stall seen, tagged and set aside (issue 13)."""

from __future__ import annotations

import json
import resource
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import ROOT, run_command
from tests.helpers.distributed import start_cluster
from tests.helpers.truth_edges import sent_at_the_edges
from tpot_locust.common.clock import KERNEL_CLOCK, SEGMENT_CLOCK
from tpot_locust.common.results_folder import ResultsFolder
from tpot_locust.common.run_facts import RunFacts
from tpot_locust.metrics.histograms import exact_percentile
from tpot_locust.report.truth_check import load_stall_windows, true_samples_ms
from tpot_locust.sim.process import start_simulator
from tpot_locust.wire.segment_stamps import process_tap

# A stall of ours (Locust's stop: 25-80 ms; burst prompts built at send time: ~25 ms) is
# above what this machine's scheduler does to a process now and then (up to ~20 ms).
OWN_STALL_MS = 25.0
# The bound for every figure of the planted-stall run (TPOT, ITL and TTFT, P99.99 and
# max included: each one sample of ~80k). It holds since the truth is the kernel's transmit
# stamp (sim/send_stamps.py): with the stamp taken before the write, a simulator held between
# the two on a busy 2-core VM moved single samples up to +0.3 ms (3 runs in ~30 failed at
# 0.1); and, for TTFT, since t_send is the request's departure seen by the tap (its p99 was
# once +0.24 ms with the stamp before the send). Measured since: 3-4 runs each of 1 process
# and 2 workers, every error within 0.03 ms. The kernel clock's error that recovery removes
# is ~40 ms.
TAIL_TOLERANCE_MS = 0.1


def _run(tmp_path: Path, python: str, scenario: str, *args: str) -> tuple[dict, str]:
    out = tmp_path / "out"
    result = run_command(
        [
            python,
            "-m",
            "tpot_locust",
            "run",
            str(ROOT / "tests/scenarios" / scenario),
            "--out",
            str(out),
            *args,
        ],
        timeout=240,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return json.loads((out / "summary.json").read_text()), result.stdout


def assert_tail_true(summary: dict, tolerances: dict[str, float]) -> None:
    """Each figure within its tolerance of the truth, or the run says why: samples above it
    overlap client stalls (the report warns next to it). On a quiet machine the first holds;
    on a busy 2-core VM, whose scheduler holds either process for up to ~20 ms now and then,
    the second can (and then setting the stalls aside can also drop true gaps of the server
    that was held at the same moment, so that figure is not asserted here)."""
    rows = summary["truth_check"]["metrics"]["tpot"]
    stalls = summary["metrics"]["tpot"]["client_stall"]
    for key, tolerance in tolerances.items():
        row = rows[key]
        if abs(row["error"]) <= tolerance:
            continue
        tagged = stalls["count"] if key == "max" else stalls.get("above", {}).get(key, 0)
        assert tagged, (
            f"TPOT {key} off by {row['error']} ms and no client stall above it; "
            f"arrival clocks {summary['client'].get('arrival_clocks')}, "
            f"worst stalls {summary['client'].get('worst_stalls', [])[:3]}"
        )


def assert_no_own_stall_at_stop(summary: dict) -> None:
    """Locust's stop ran while the last requests streamed and held the loop 25-70 ms."""
    stop_s = summary["run"]["duration_s"]
    near_stop = [
        stall
        for stall in summary["client"]["worst_stalls"]
        if abs(stall["at_s"] - stop_s) < 1.0 and stall["ms"] >= OWN_STALL_MS
    ]
    assert not near_stop, near_stop


WHOLE_RUN_TOLERANCES_MS = {"p50": 0.3, "p99": 1.0, "p99.9": 1.0, "p99.99": 1.0, "max": 2.0}


@pytest.mark.parametrize("workers", [0, 2])
def test_whole_run_tail_matches_truth(tmp_path: Path, python: str, workers: int) -> None:
    """A run whose tail misses is run once more: in one CI run of the full suite (2 workers,
    2 cores) TPOT max came out 16 ms above the truth with no client stall tagged, once in
    many (here 4 runs of 2 workers: max within 0.02 ms, every request on the segment clock);
    not explained
    yet, so the first miss is printed (``pytest -rP``) and a second fails."""
    for attempt in (1, 2):
        out = tmp_path / f"attempt{attempt}"
        out.mkdir()
        before = _children_cpu_s()
        summary, stdout = _run(out, python, "tail_truth.yaml", "--workers", str(workers))
        children_cpu_s = _children_cpu_s() - before  # every process the run started
        try:
            assert_tail_true(summary, WHOLE_RUN_TOLERANCES_MS)
            break
        except AssertionError as missed:
            held = _held_by_tcp(summary, out / "out" / "truth.jsonl")
            if attempt == 2 and not held:
                raise
            print(f"attempt {attempt} missed ({held or 'not held by TCP'}): {missed}")
    count = summary["truth_check"]["metrics"]["tpot"]["count"]
    edge = _sent_at_the_edges(out / "out" / "truth.jsonl", summary["run"]["window_wall_ns"])
    assert abs(count["measured"] - count["true"]) <= edge, (count, edge)
    assert_no_own_stall_at_stop(summary)
    # the window is the run asked for (Locust's --run-time counted from the loop's clock at
    # start, not from before the imports: 0.6 s of 20 went missing)
    start, end = summary["run"]["window_wall_ns"]
    assert end - start >= (summary["run"]["duration_s"] - 0.25) * 1e9, (end - start) / 1e9
    assert "truth check: every TPOT, ITL and TTFT figure" in stdout  # the first screen's line
    if workers:
        assert set(summary["workers"]["stalls"]) == set(summary["workers"]["read_delay_p99_ms"])
        assert len(summary["workers"]["stalls"]) == workers
        held = summary["workers"]["loop_held_share"]  # each worker's own, and none saturated
        assert set(held) == set(summary["workers"]["stalls"]) and max(held.values()) < 0.5
    # the whole run's loops were far from saturated (0.01-0.03 here); an interval is left
    # unchecked: one second the OS gives a neighbour is not this test's to fail on
    assert summary["client"]["loop_saturated"] is False
    assert any("loop_held_share" in point for point in summary["timeseries"])
    # what reading cost: the stamping processes' CPU, a part of all the run's processes'
    client = summary["client"]
    assert 0 < client["cpu_s"] <= children_cpu_s, (client["cpu_s"], children_cpu_s)
    assert client["cpu_us_per_token"] * client["tokens_per_core_s"] == pytest.approx(1e6, 1e-3)


# Two processes' stamps of one token, the server's send and our arrival, lie a few us apart
# on loopback, and each process puts perf_counter_ns on the wall's scale by its own offset
# (here they agree within ~3 us: common.clock): a token that left this close to the window's
# edge may count on either side of it, in the truth or in the run.
EDGE_NS = 20_000


def _sent_at_the_edges(truth: Path, window_wall_ns: list[int]) -> int:
    """The true token events (after each request's first) that left within ``EDGE_NS`` of
    the window's start or end: the most the measured gaps of the window may differ by."""
    start, end = window_wall_ns
    near = 0
    for line in truth.read_text().splitlines():
        sends = np.asarray(json.loads(line).get("send_ns") or [], dtype=np.int64)[1:]
        near += int(
            np.count_nonzero((abs(sends - start) <= EDGE_NS) | (abs(sends - end) <= EDGE_NS))
        )
    return near


def _held_by_tcp(summary: dict, truth: Path) -> str:
    """The largest measured gap's request, where the truth says TCP held some of its writes
    back (the segment left after the write call: the truth keeps the write's time, so the
    later arrivals we stamped are no error of ours; seen twice in one full suite here, a
    request's gaps ~27 ms long every ~40 ms, the delayed-ACK timer): "<id>: N of M writes
    held", else ""."""
    gaps = summary.get("attribution", {}).get("tail_gaps") or []
    if not gaps:
        return ""
    worst = gaps[0]["request_id"]
    for line in truth.read_text().splitlines():
        record = json.loads(line)
        if record.get("request_id") == worst:
            sends, at_once = len(record.get("send_ns") or []), record.get("kernel_sends")
            if isinstance(at_once, int) and at_once < sends:
                return f"{worst}: {sends - at_once} of {sends} writes held"
    return ""


def _children_cpu_s() -> float:
    """The CPU time of this test's processes that ended, and of theirs (``RUSAGE_CHILDREN``)."""
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def _burst_windows_truth(truth: Path) -> tuple[np.ndarray, np.ndarray]:
    """True TPOT of decode gaps inside and outside the burst windows (arrival of a
    long-prompt request to its first token)."""
    records = [json.loads(line) for line in truth.read_text().splitlines()]
    requests = [r for r in records if "request_id" in r and not r["aborted"] and r["send_ns"]]
    windows = [(r["arrival_ns"], r["send_ns"][0]) for r in requests if r["prompt_tokens"] > 8000]
    inside, outside = [], []
    for record in requests:
        if record["prompt_tokens"] > 8000:
            continue
        stamps = np.asarray(record["send_ns"], dtype=np.int64)
        starts, ends = stamps[:-1], stamps[1:]
        mask = np.zeros(starts.shape, dtype=bool)
        for start, end in windows:
            mask |= (starts < end) & (ends > start)
        gaps = np.diff(stamps) / 1e6
        inside.append(gaps[mask])
        outside.append(gaps[~mask])
    return np.concatenate(inside), np.concatenate(outside)


def test_gap_mode_bursts_show_no_interference(tmp_path: Path, python: str) -> None:
    """Bursts cannot slow a gap-mode simulator's streams: what the report calls interference
    here is the client's own (it was 3.9x when burst prompts were built at send time)."""
    summary, _ = _run(tmp_path, python, "burst_gap_mode.yaml")
    interference = summary["interference"]
    assert interference is not None
    burst_p99 = interference["phases"]["burst"]["tpot"]["p99"]
    true_inside, _ = _burst_windows_truth(tmp_path / "out" / "truth.jsonl")
    true_p99 = float(np.percentile(true_inside, 99, method="inverted_cdf"))
    factor = interference["interference_factor"]["tpot"]["p99"]
    assert abs(burst_p99 - true_p99) <= 1.0, (burst_p99, true_p99, summary["client"])
    assert 0.8 <= factor <= 1.2, (factor, interference)


def _gaps_against_truth(stamps_file: Path, truth_path: Path, out: Path, run: dict) -> tuple:
    """Every measured gap inside the run's window (every request's, cut ones too) with its
    own true gap, and whether the recorder's rule tags it (it overlaps a stall window of
    this process, or a shared read distorted it)."""
    start, end = run["window_wall_ns"]
    truth = {}
    for line in truth_path.read_text().splitlines():
        record = json.loads(line)
        if "request_id" in record:
            truth[record["request_id"]] = record
    (windows,) = load_stall_windows(ResultsFolder(out)).values()
    measured, true, tagged = [], [], []
    for line in stamps_file.read_text().splitlines():
        request = json.loads(line)
        record = truth[request["id"]]
        stamps = np.asarray(request["stamps"], dtype=np.int64)
        sends = np.asarray(record["send_ns"], dtype=np.int64)
        # a request the stop cut: the server may have sent a token more than was read
        assert stamps.size == sends.size or (record["aborted"] and stamps.size < sends.size)
        sends = sends[: stamps.size]
        walls = stamps  # the stamp clock: wall ns already (common.clock)
        gaps = np.diff(stamps)
        shared = gaps == 0
        read_together = shared.copy()
        read_together[:-1] |= shared[1:]
        inside = (walls[1:] >= start) & (walls[1:] <= end)  # the recorder's window rule
        measured.append(gaps[inside])
        true.append(np.diff(sends)[inside])
        tagged.append((windows.overlaps(walls[:-1], walls[1:]) | read_together)[inside])
    return tuple(np.concatenate(parts) for parts in (measured, true, tagged))


PLANTED_STALL = str(ROOT / "tests/helpers/locust_planted_stall.py")


def _planted_stall_run(
    tmp_path: Path, python: str, workers: int = 0, stamps: str = SEGMENT_CLOCK
) -> tuple[dict, str]:
    """16 streams of 3 ms gaps for 15 s, each recording process's loop held 40 ms once at
    5 s; the summary and the master's output (the truth in ``tmp_path/truth.jsonl``)."""
    truth_path, out, stamps_file = (tmp_path / name for name in ("truth.jsonl", "out", "s.jsonl"))
    env = {"TPOT_LOCUST_STAMPS": stamps} | ({} if workers else {"STAMPS_FILE": str(stamps_file)})
    with start_simulator("--gap-ms", "3", "--ttft-ms", "20", truth=truth_path) as sim:
        if workers:
            cluster = start_cluster(
                sim.url,
                out,
                workers,
                16,
                "15s",
                "--only-summary",
                "--stop-timeout",
                "5",
                env=env,
                locustfile=PLANTED_STALL,
            )
            returncode, output = cluster.wait(timeout=120)
        else:
            result = run_command(
                [
                    python,
                    "-m",
                    "locust",
                    "-f",
                    PLANTED_STALL,
                    "--headless",
                    "-u",
                    "16",
                    "-r",
                    "16",
                    "-t",
                    "15s",
                    "--host",
                    sim.url,
                    "--tpot-out",
                    str(out),
                    "--only-summary",
                    "--stop-timeout",
                    "5",
                ],
                timeout=120,
                env=env,
            )
            returncode, output = result.returncode, result.stdout + result.stderr
    assert returncode == 0, output[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    planted = [s for s in summary["client"]["worst_stalls"] if s["ms"] >= 40]
    assert len(planted) >= max(workers, 1), summary["client"]["worst_stalls"]
    # the terminal shows the report's first screen; every line of it is in report.txt
    return summary, output + (out / "report.txt").read_text()


def _tail_errors_ms(
    summary: dict, truth_path: Path, metric: str = "tpot", *, on_arrival: bool = False
) -> dict[str, float]:
    """Measured minus true ``metric`` at P99, P99.9, P99.99 and max (every sample counted),
    and for TTFT and ITL at P50 and P90 too. Counts are equal on the segment clock (a
    segment's copy is taken as it leaves); ``on_arrival`` (the kernel's receive stamp) lets
    them differ by the tokens sent at the window's edges."""
    true = true_samples_ms(truth_path, RunFacts.from_json(summary["run"]))[metric]
    measured = summary["metrics"][metric]
    edge = sent_at_the_edges(truth_path, summary["run"]["window_wall_ns"]) if on_arrival else 0
    assert abs(measured["count"] - true.size) <= edge, (measured["count"], true.size, edge)
    points = [("p99", 99.0), ("p99.9", 99.9), ("p99.99", 99.99)]
    if metric != "tpot":
        points = [("p50", 50.0), ("p90", 90.0), *points]
    errors = {key: measured[key] - exact_percentile(true, p) for key, p in points}
    errors["max"] = measured["max"] - float(true.max())
    return errors


@pytest.mark.skipif(process_tap() is None, reason="no segment tap here (needs CAP_NET_RAW)")
@pytest.mark.parametrize("workers", [0, 2])
def test_planted_stall_moves_no_stamp_and_nothing_is_set_aside(
    tmp_path: Path, python: str, workers: int
) -> None:
    """Each token's own arrival, recovered from its segment: the 40 ms hold of the reading
    loop is reported as the client's, but no figure moved and no sample is set aside."""
    summary, output = _planted_stall_run(tmp_path, python, workers)
    for metric in ("tpot", "itl", "ttft"):  # TTFT from the request's departure (the tap's)
        errors = _tail_errors_ms(summary, tmp_path / "truth.jsonl", metric)
        assert all(abs(error) <= TAIL_TOLERANCE_MS for error in errors.values()), (metric, errors)
    clocks, tpot = summary["client"]["arrival_clocks"], summary["metrics"]["tpot"]
    # A request a segment copy missed one read of (1 in ~300 runs' worth, not yet explained)
    # is stamped on the kernel clock and tagged by the old rules: under 0.1 % of samples.
    assert clocks.get(KERNEL_CLOCK, 0) <= 0.01 * clocks[SEGMENT_CLOCK], clocks
    assert tpot["client_stall"]["count"] <= 0.001 * tpot["count"], tpot["client_stall"]
    if set(clocks) == {SEGMENT_CLOCK}:  # every stamp recovered: nothing said about stalls
        assert tpot["client_stall"] == {"count": 0}
        assert "stall-free" not in output and " in stalls" not in output
        assert "! client stalls" not in output and "none moved" in output


def test_planted_stall_is_seen_tagged_and_set_aside(tmp_path: Path, python: str) -> None:
    """With recovery off (kernel stamps: the switch): the tokens that waited share the
    newest one's stamp, the tail is off by the stall, and the tagging rule sets it aside."""
    truth_path, stamps = tmp_path / "truth.jsonl", tmp_path / "s.jsonl"
    summary, output = _planted_stall_run(tmp_path, python, stamps=KERNEL_CLOCK)
    # What recovery takes away: the 40 ms hold less the true max, which a busy CI machine's
    # simulator raised to ~10 ms once (error 29.7 ms); recovered, it is within 0.1 ms.
    assert _tail_errors_ms(summary, truth_path, on_arrival=True)["max"] > 20
    client = summary["client"]
    planted = [s for s in client["worst_stalls"] if s["ms"] >= 40 and 4.0 < s["at_s"] < 7.0]
    assert planted, client["worst_stalls"]
    assert client["arrival_clocks"].keys() == {KERNEL_CLOCK}
    out = tmp_path / "out"
    tpot = summary["metrics"]["tpot"]
    assert tpot["client_stall"]["count"] >= 16  # every stream had a gap across the stall
    assert tpot["client_stall"]["max"] >= 40
    assert tpot["max"] >= 40  # as measured, the stall is in the figures...
    assert " in stalls" in output  # ...and the report says whose it is
    assert "! client stalls" in output
    assert any(gap["client_stall"] for gap in summary["worst_gaps"])
    # With the tagged samples set aside, what is left is the server's: each remaining gap
    # against its own true gap, P99.99 and max within 1 ms.
    measured, true, tagged = _gaps_against_truth(stamps, truth_path, out, summary["run"])
    # the recorder's rule (this test's clock conversion may move a gap at a window's edge)
    assert abs(int(tagged.sum()) - tpot["client_stall"]["count"]) <= 2
    kept_measured, kept_true = measured[~tagged] / 1e6, true[~tagged] / 1e6
    for percentile in (99.99, 100):
        ours = float(np.percentile(kept_measured, percentile, method="inverted_cdf"))
        theirs = float(np.percentile(kept_true, percentile, method="inverted_cdf"))
        assert abs(ours - theirs) <= 1.0, (percentile, ours, theirs)
    # and the report's stall-free max is that same figure (HDR: within 0.1 %)
    assert abs(tpot["client_stall"]["set_aside"]["max"] - kept_measured.max()) <= 0.02


def test_a_client_gc_pause_is_named_as_one(tmp_path: Path, python: str) -> None:
    """Issue 44, item 3: a stall during which this client's garbage collector ran is shown
    as a client GC, so a reader knows to tune ``gc`` rather than add workers."""
    out = tmp_path / "out"
    with start_simulator("--gap-ms", "3", "--ttft-ms", "20") as sim:
        result = run_command(
            [
                python,
                "-m",
                "locust",
                "-f",
                PLANTED_STALL,
                "--headless",
                "-u",
                "8",
                "-r",
                "8",
                "-t",
                "6s",
                "--host",
                sim.url,
                "--tpot-out",
                str(out),
                "--only-summary",
            ],
            timeout=120,
            env={"PLANTED_STALL_KIND": "gc", "PLANTED_STALL_AFTER_S": "2"},
        )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    client = json.loads((out / "summary.json").read_text())["client"]
    assert client["gc_stalls"] >= 1, client
    collected = [stall for stall in client["worst_stalls"] if stall.get("gc") == 2]
    assert collected and collected[0]["ms"] >= 10, client["worst_stalls"]
    full = (out / "report.txt").read_text()  # the full report (the terminal shows less)
    assert "while this client's garbage collector ran: a client GC" in full
