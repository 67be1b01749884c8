"""SLO parsing and the gate's verdicts on given summaries."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT
from tpot_locust.common.results_folder import ResultsFolder
from tpot_locust.report.gate import evaluate
from tpot_locust.report.verdict_files import format_verdict, write_verdict
from tpot_locust.scenario.loader import load_scenario
from tpot_locust.scenario.slo import SloSpec, parse_slo
from tpot_locust.scenario.yaml_source import ScenarioErrors, parse_located

GATE = ROOT / "tests/scenarios/gate.yaml"


def slo(text: str, classes: tuple[str, ...] = ("chat",), models: tuple[str, ...] = ()) -> SloSpec:
    located = parse_located(text, "s.yaml")
    spec = parse_slo(located, located.data["slo"], set(classes), frozenset(models))
    located.raise_problems()
    return spec


def summary_with(metric: dict[str, Any], **extra: Any) -> dict[str, Any]:
    base = {
        "requests": {"ok": 100, "failed": 0, "per_s": 1.0},
        "tokens": {"per_s": 10.0},
        "window_s": 100.0,
        "complete": True,
        "classes": {},
    }
    return base | {"metrics": {"tpot": metric}} | extra


def tpot(p99: float, above: int, tagged: int = 0, clean: float | None = None) -> dict[str, Any]:
    metric: dict[str, Any] = {"count": 100_000, "p99": p99, "above": {"p99": above}}
    if tagged:
        metric["client_stall"] = {
            "count": tagged,
            "above": {"p99": tagged},
            "set_aside": {"p99": clean},
        }
    return metric


def test_units_times_percentages_and_legacy_keys() -> None:
    spec = slo("slo: {tpot: {P99: 0.015s, 99.9: 20}, tpot_p50_ms: 2, error_rate: 0.1%}")
    bounds = {(o.metric, o.statistic): o.limit for o in spec.objectives}
    assert bounds == {
        ("tpot", "p99"): 15.0,
        ("tpot", "p99.9"): 20.0,
        ("tpot", "p50"): 2.0,
        ("error_rate", None): 0.001,
    }
    legacy = slo("slo: {tpot_p99_ms: 25, ttft_p99_ms: 2000, error_rate: 0.01}")
    assert {(o.metric, o.statistic, o.limit) for o in legacy.objectives} == {
        ("tpot", "p99", 25.0),
        ("ttft", "p99", 2000.0),
        ("error_rate", None, 0.01),
    }


def test_set_overrides_an_slo(tmp_path: Path) -> None:
    scenario = load_scenario(GATE, ["slo.tpot.p99=7ms"])
    assert {(o.metric, o.statistic): o.limit for o in scenario.slo.objectives}[("tpot", "p99")] == 7


def test_stall_tagged_samples_above_a_gated_percentile_make_it_invalid() -> None:
    strict = slo("slo: {tpot: {p99: 10ms}}")
    assert evaluate(strict, summary_with(tpot(5, 1000)))["exit_code"] == 0
    verdict = evaluate(strict, summary_with(tpot(5, 1000, tagged=3, clean=4.9)))
    assert verdict["exit_code"] == 3 and verdict["checks"][0]["verdict"] == "invalid"
    decisive = slo("slo: {tpot: {p99: 10ms}, client_stalls: decisive}")
    assert evaluate(decisive, summary_with(tpot(5, 1000, tagged=3, clean=4.9)))["exit_code"] == 0
    # the stalls decide it: raw fails, stall-free would pass
    assert evaluate(decisive, summary_with(tpot(12, 1000, tagged=30, clean=8)))["exit_code"] == 3
    assert evaluate(decisive, summary_with(tpot(12, 1000, tagged=30, clean=11)))["exit_code"] == 1


def test_a_lost_worker_or_a_failed_truth_check_invalidates_the_run() -> None:
    spec = slo("slo: {tpot: {p99: 10ms}}")
    lost = summary_with(tpot(5, 1000), complete=False, workers={"missing": ["w1"]})
    verdict = evaluate(spec, lost)
    assert verdict["exit_code"] == 3 and "w1" in verdict["run_invalid"][0]
    truth = {"passed": False, "worst_error_ms": 4.0, "tolerance_ms": 1.0}
    assert evaluate(spec, summary_with(tpot(5, 1000), truth_check=truth))["exit_code"] == 3


def test_bursts_that_never_went_invalidate_a_gate_on_them_and_warn_otherwise() -> None:
    """Issue 43, item 8: a burst of 5,000 never fired (its preparation outlasted the run)
    and the run exited 0 with ``errors: none``."""
    missed = {"due": 5000, "sent": 0, "late": 0}
    gated = slo("slo: {interference: {tpot_p99: 3.0}}")
    factors = {"tpot": {"p99": 1.0}, "itl": {"p99": 1.0}}
    summary = summary_with(
        tpot(5, 1000), interference={"interference_factor": factors}, bursts=missed
    )
    verdict = evaluate(gated, summary)
    assert verdict["exit_code"] == 3
    assert verdict["run_invalid"] == [
        "bursts: 5,000 of 5,000 burst requests never sent "
        "(preparing them outlasted their time: fewer per burst)"
    ]
    plain = evaluate(slo("slo: {tpot: {p99: 10ms}}"), summary)
    assert plain["exit_code"] == 0 and "5,000 of 5,000" in plain["warnings"][0]
    late = summary | {"bursts": {"due": 8, "sent": 8, "late": 3}}
    assert "3 sent over 0.5 s late" in evaluate(gated, late)["run_invalid"][0]
    on_time = summary | {"bursts": {"due": 8, "sent": 8, "late": 0}}
    assert evaluate(gated, on_time)["exit_code"] == 0


def test_a_run_of_gaps_with_no_finished_request_is_a_measurement() -> None:
    """Answers longer than the run (issue 42): gated on their gaps, not invalid."""
    spec = slo("slo: {tpot: {p99: 10ms}}")
    unfinished = summary_with(
        tpot(5, 1000), requests={"ok": 0, "failed": 0, "per_s": 0.0}, window={"gaps": 100_000}
    )
    assert evaluate(spec, unfinished)["exit_code"] == 0
    assert evaluate(spec, unfinished | {"window": {"gaps": 0}})["exit_code"] == 3


def test_goodput_counts_failed_requests_as_not_good() -> None:
    from tpot_locust.metrics.metric_set import ClassCounters
    from tpot_locust.report.summary import goodput_summary

    counters = ClassCounters(ok=8, failed=2, good=6)
    assert goodput_summary(counters, 2.0, {"ttft": 800.0}) == {
        "limits_ms": {"ttft": 800.0},
        "good": 6,
        "per_s": 3.0,
        "fraction": 0.6,
    }
    rule = slo("slo: {goodput: {ttft: 800ms, worst_gap: 50ms}}").goodput
    assert rule is not None
    assert rule.met_by({"ttft": 700e6, "worst_gap": 10e6, "e2e": 9e9})
    assert not rule.met_by({"ttft": 900e6, "worst_gap": 10e6})
    assert rule.met_by({"ttft": 700e6})  # one token: no gap


def test_interference_and_error_rate_objectives() -> None:
    spec = slo("slo: {interference: {tpot_p99: 3.0}, error_rate: 1%}")
    factors = {"tpot": {"p99": 4.2}, "itl": {"p99": 1.0}}
    summary = summary_with(tpot(5, 1000), interference={"interference_factor": factors})
    checks = {c["metric"]: c for c in evaluate(spec, summary)["checks"]}
    assert checks["tpot"]["verdict"] == "fail" and checks["tpot"]["measured"] == 4.2
    assert checks["error_rate"]["verdict"] == "pass"
    summary["requests"] = {"ok": 98, "failed": 2, "per_s": 1.0}
    assert evaluate(spec, summary | {"interference": None})["checks"][0]["verdict"] == (
        "insufficient"
    )
    assert {c["metric"]: c["verdict"] for c in evaluate(spec, summary)["checks"]}[
        "error_rate"
    ] == "fail"


def test_a_pace_gives_deadlines_and_gates_the_tokens_on_time() -> None:
    rate = slo("slo: {pace: 20}")
    assert rate.pace is not None and rate.pace.as_ms() == {"ttft": 1000.0, "tpot": 50.0}
    assert rate.objectives == ()
    spec = slo("slo: {pace: {tpot: 40ms, ttft: 2s, min_on_time: 99%}, stall_time: {p99: 1s}}")
    assert spec.pace is not None and spec.pace.as_ms() == {"ttft": 2000.0, "tpot": 40.0}
    fluidity = {"tokens": 1000, "late_tokens": 20, "on_time_fraction": 0.98, "late_requests": 3}
    summary = summary_with(tpot(5, 1000), fluidity=fluidity)
    summary["metrics"]["stall_time"] = {"count": 100, "p99": 300.0, "above": {"p99": 10}}
    checks = {c["metric"]: c for c in evaluate(spec, summary)["checks"]}
    assert checks["on_time_fraction"]["verdict"] == "fail"
    assert checks["on_time_fraction"]["measured"] == 0.98
    assert checks["stall_time"]["verdict"] == "pass"
    unpaced = evaluate(spec, summary | {"fluidity": None})["checks"]
    assert {c["metric"]: c["verdict"] for c in unpaced}["on_time_fraction"] == "insufficient"


def test_a_pace_is_checked_where_it_is_written() -> None:
    for text, message in (
        ("slo: {pace: {ttft: 1s}}", "slo.pace.*needs one of tokens_per_s"),
        ("slo: {pace: {tokens_per_s: 20, tpot: 5ms}}", "slo.pace.*needs one of"),
        ("slo: {pace: {tokens_per_second: 20}}", "slo.pace.tokens_per_second.*unknown key"),
        ("slo: {pace: -3}", "slo.pace.tokens_per_s.*must be a number > 0"),
        ("slo: {pace: {tpot: 5ms, min_on_time: 140%}}", "slo.pace.min_on_time"),
    ):
        with pytest.raises(ScenarioErrors, match=message):
            slo(text)


def test_a_model_is_gated_on_its_own_figures() -> None:
    spec = slo(
        "slo: {tpot: {p99: 10ms}, models: {lora-b: {tpot: {p99: 10ms}, error_rate: 1%}}}",
        models=("lora-a", "lora-b"),
    )
    scoped = [o for o in spec.objectives if o.model]
    assert [(o.model, o.metric, o.class_name) for o in scoped] == [
        ("lora-b", "tpot", None),
        ("lora-b", "error_rate", None),
    ]
    assert scoped[0].name == "model lora-b: tpot p99 <= 10 ms"
    lora_b = summary_with(tpot(14, 1000))  # the adapter's own tail, hidden in the whole run's
    summary = summary_with(
        tpot(6, 1000), models={"lora-a": summary_with(tpot(5, 1000)), "lora-b": lora_b}
    )
    verdict = evaluate(spec, summary)
    by_name = {check["name"]: check for check in verdict["checks"]}
    assert by_name["tpot p99 <= 10 ms"]["verdict"] == "pass"
    assert by_name["model lora-b: tpot p99 <= 10 ms"]["verdict"] == "fail"
    assert by_name["model lora-b: tpot p99 <= 10 ms"]["model"] == "lora-b"
    assert verdict["exit_code"] == 1
    unsent = evaluate(spec, summary | {"models": {"lora-a": summary_with(tpot(5, 1000))}})
    missing = {c["name"]: c for c in unsent["checks"]}["model lora-b: tpot p99 <= 10 ms"]
    assert missing["verdict"] == "insufficient"
    assert missing["why"] == "no request went to model lora-b"


def test_an_slo_for_a_model_no_class_names_is_an_error() -> None:
    with pytest.raises(
        ScenarioErrors,
        match=r"slo.models.lora-bb: no class names this model "
        r"\(did you mean lora-b\?\); the classes name lora-a, lora-b",
    ):
        slo("slo: {models: {lora-bb: {tpot: {p99: 10ms}}}}", models=("lora-a", "lora-b"))
    with pytest.raises(ScenarioErrors, match="no class names a model"):
        slo("slo: {models: {lora-c: {tpot: {p99: 10ms}}}}")
    with pytest.raises(ScenarioErrors, match="slo.models: must map model names"):
        slo("slo: {models: [lora-a]}", models=("lora-a",))


# --- what a person reads of a verdict (issue 53) ----------------------------------------------


def test_junit_says_measured_once_and_ends_with_a_newline(tmp_path: Path) -> None:
    spec = slo("slo: {tpot: {p99: 1ms}, ttft: {p99: 2s}}")
    summary = summary_with(tpot(2.333, 1000))
    summary["metrics"]["ttft"] = {"count": 100, "p99": 30.0, "above": {"p99": 1}}
    verdict = evaluate(spec, summary)
    write_verdict(ResultsFolder.of(tmp_path), verdict, "gate")
    text = (tmp_path / "junit.xml").read_text()
    assert text.endswith("</testsuites>\n") and text.startswith("<?xml version=")
    failures = [f.text or "" for f in ET.fromstring(text).iter("failure")]
    assert "measured 2.333 ms > limit 1 ms" in failures  # not "measured 2.333 ms; measured ..."
    assert all(f.count("measured") <= 1 for f in failures), failures
    # a check whose why says no figure still gets one
    assert "measured 30 ms; 1 sample above p99 (needs 10): " in failures[1], failures
    for name in ("verdict.json", "summary.md"):
        assert (tmp_path / name).read_text().endswith("\n")


def test_a_rate_objective_says_its_unit_and_one_sample_is_singular() -> None:
    spec = slo("slo: {throughput: {tokens_per_s: 100, requests_per_s: 2000}}")
    summary = summary_with(tpot(5, 1000), tokens={"per_s": 1921.5})
    summary["requests"]["per_s"] = 1234.0
    whys = [check["why"] for check in evaluate(spec, summary)["checks"]]
    assert whys == [
        "measured 1,921.5 tokens/s >= limit 100 tokens/s",
        "measured 1,234 requests/s < limit 2,000 requests/s",
    ]
    one = evaluate(slo("slo: {tpot: {p99: 10ms}}"), summary_with(tpot(5, 1)))
    assert one["checks"][0]["why"].startswith("1 sample above p99 (needs 10)")


def test_the_terminals_verdict_fits_100_columns_and_the_full_one_is_whole() -> None:
    spec = slo("slo: {tpot: {p50: 5ms, p99: 1ms}, throughput: {tokens_per_s: 100}}")
    figures = tpot(2.333, 1000) | {"p50": 1.0, "above": {"p99": 1000, "p50": 50_000}}
    verdict = evaluate(spec, summary_with(figures, tokens={"per_s": 500.0}))
    screen = format_verdict(verdict)
    assert all(len(line) <= 100 for line in screen) and len(screen) <= 12
    assert screen[1].startswith("  PASS          2 of 3: tpot p50 <= 5 ms (1 ms), tokens_per_s")
    assert screen[2] == "  FAIL          tpot p99 <= 1 ms: measured 2.333 ms > limit 1 ms"
    full = format_verdict(verdict, full=True)
    assert full[1:3] == ["  PASS         tpot p50 <= 5 ms", f"  {'':13}measured 1 ms <= limit 5 ms"]
