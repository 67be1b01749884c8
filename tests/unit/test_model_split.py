"""Several models or LoRA adapters behind one endpoint (issue 31, item 3): the class's split
dealt out by weight, its figures kept per model and per class, and the simulator's adapters
(batches of at most ``max_loras`` adapters, a load time per adapter brought into a slot)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.unit.test_reasoning_and_cache import timings
from tpot_locust.common.metric_groups import group_parts, metric_group
from tpot_locust.harness.load.scenario_users import build_user_classes
from tpot_locust.harness.run.worker_deltas import pack_delta, unpack_delta
from tpot_locust.harness.users.model_split import ModelSplit
from tpot_locust.harness.web.web_tab import tab_rows
from tpot_locust.metrics.histograms import histogram_stats
from tpot_locust.metrics.live_sections import LiveSections
from tpot_locust.metrics.metric_set import MetricSet
from tpot_locust.metrics.recorder import Recorder
from tpot_locust.report.html import RunView, render_report
from tpot_locust.report.summary import build_summary, format_full_report
from tpot_locust.scenario.schema import validate
from tpot_locust.scenario.yaml_source import Located, ScenarioErrors
from tpot_locust.sim.engine import EngineCore, Seq
from tpot_locust.sim.profiles import EngineParams
from tpot_locust.sim.request import RequestError, parse_request

MS = 1_000_000


# --- the split ----------------------------------------------------------------------------


def test_a_split_deals_each_model_its_weight_within_one_pick_at_every_point() -> None:
    split = ModelSplit({"lora-a": 3, "lora-b": 1})
    picks = [split.pick() for _ in range(400)]
    assert Counter(picks) == {"lora-a": 300, "lora-b": 100}
    for end in range(1, len(picks) + 1):  # smooth: never a run of one model's picks
        assert abs(picks[:end].count("lora-b") - end / 4) <= 1
    thirds = ModelSplit({"x": 1.5, "y": 1.5, "z": 1.5})
    assert Counter(thirds.pick() for _ in range(30)) == {"x": 10, "y": 10, "z": 10}


def test_a_worker_begins_its_round_at_its_own_index() -> None:
    assert ModelSplit({"a": 1, "b": 1}).pick() == "a"
    assert ModelSplit({"a": 1, "b": 1}, skip=1).pick() == "b"
    with pytest.raises(ValueError):
        ModelSplit({"a": 0})


def _scenario(document: dict) -> object:
    return validate(Located(str(Path("x.yaml").resolve()), document, {}))


def test_the_class_model_key_is_one_name_or_names_with_weights() -> None:
    scenario = _scenario(
        {
            "classes": {
                "chat": {"users": 1, "model": {"lora-a": 3, "b": 1}},
                "solo": {"users": 1, "model": "base"},
            }
        }
    )
    chat, solo = build_user_classes(scenario)
    assert chat.current_settings().request.model_split == {"lora-a": 3.0, "b": 1.0}
    assert solo.current_settings().request.model_split == {"base": 1.0}
    for bad, message in (
        ({"a": 0}, "classes.chat.model.a: must be > 0"),
        ({"a": float("nan")}, "classes.chat.model.a: must be a finite number"),
        ({"a": "x"}, "classes.chat.model.a: must be a number"),
        ([1], "classes.chat.model: must be a model name, or a mapping"),
        ({}, "classes.chat.model: must be a model name, or a mapping"),
        ("bad\nname", "classes.chat.model: a model name is 1 to 256 printable"),
    ):
        with pytest.raises(ScenarioErrors) as raised:
            _scenario({"classes": {"chat": {"users": 1, "model": bad}}})
        assert message in str(raised.value)


# --- figures per model --------------------------------------------------------------------


def test_a_model_name_with_the_separator_still_splits_at_the_class() -> None:
    assert group_parts(metric_group("chat", "org/m@v2")) == ("chat", "org/m@v2")
    assert group_parts(metric_group("chat", None)) == ("chat", None)


def _recorded(per_model: dict[tuple[str, str | None], int]) -> MetricSet:
    recorder = Recorder()
    for (user_class, model), count in per_model.items():
        for number in range(count):
            request = timings(f"{user_class}-{model}-{number}")
            request.user_class, request.model = user_class, model
            recorder.record(request)
    return recorder.take_interval(final=True)


def test_figures_are_kept_per_model_and_per_class_exactly_and_cross_workers() -> None:
    totals = _recorded(
        {("chat", "lora-a"): 6, ("chat", "lora-b"): 2, ("batch", "lora-a"): 3, ("plain", None): 4}
    )
    classes, models = totals.by_class(), totals.by_model()
    assert {name: m.counters.ok for name, m in classes.items()} == {
        "chat": 8,
        "batch": 3,
        "plain": 4,
    }
    assert {name: m.counters.ok for name, m in models.items()} == {"lora-a": 9, "lora-b": 2}
    ttft = histogram_stats(models["lora-a"].histograms["ttft"], ())
    assert ttft.count == 9  # samples, not averages: the model's own histogram
    # a worker's delta carries the groups; the master's merge gives the same per model
    merged = MetricSet()
    unpack_delta("w1", pack_delta(totals)).add_to(merged)
    assert {name: m.counters.ok for name, m in merged.by_model().items()} == {
        "lora-a": 9,
        "lora-b": 2,
    }
    summary = build_summary(totals)
    assert set(summary["classes"]) == {"chat", "batch", "plain"}
    assert summary["models"]["lora-b"]["requests"]["ok"] == 2
    assert summary["requests"]["ok"] == 15  # each request once in the whole run
    assert "model lora-b" in format_full_report(summary)
    page = render_report([RunView("split", summary, totals)])
    assert 'data-label="model lora-b"' in page  # a curve per model in report.html


def test_a_run_without_models_has_no_models_section() -> None:
    summary = build_summary(_recorded({("chat", None): 2}))
    assert "models" not in summary and list(summary["classes"]) == ["chat"]


# --- the simulator's adapters -------------------------------------------------------------

PARAMS = dict(
    step_base_ms=5.0,
    max_num_seqs=8,
    max_num_batched_tokens=512,
    kv_cache_tokens=100_000,
    max_model_len=4096,
)


def _engine(**params: object) -> EngineCore:
    return EngineCore(EngineParams(**{**PARAMS, **params}))  # type: ignore[arg-type]


def test_one_lora_slot_runs_one_adapter_at_a_time_and_each_switch_costs_its_load() -> None:
    core = _engine(max_loras=1, adapter_load_ms=20.0)
    a, b, base = (
        Seq("a", 0, 8, 2, adapter="lora-a"),
        Seq("b", 0, 8, 2, adapter="lora-b"),
        Seq("base", 0, 8, 2),
    )
    for seq in (a, b, base):
        core.add(seq)
    first = core.step(0)
    assert first is not None and [s.request_id for s in first.emitted] == ["a", "base"]
    assert first.adapter_loads == 1 and first.end_ns - first.start_ns == 25 * MS  # b passed over
    second = core.step(first.end_ns)  # a and base decode their last token: a is done
    assert second is not None and second.adapter_loads == 0
    assert second.end_ns - second.start_ns == 5 * MS and list(core.waiting) == [b]
    third = core.step(second.end_ns)  # the batch is free of lora-a: b loads into its slot
    assert third is not None and [s.request_id for s in third.emitted] == ["b"]
    assert third.adapter_loads == 1 and third.end_ns - third.start_ns == 25 * MS
    assert third.record()["adapter_loads"] == 1


def test_adapters_already_in_a_slot_cost_nothing_and_slots_hold_max_loras() -> None:
    core = _engine(max_loras=2, adapter_load_ms=20.0)
    for name in ("a1", "b1"):
        core.add(Seq(name, 0, 8, 1, adapter=f"lora-{name[0]}"))
    step = core.step(0)
    assert step is not None and len(step.emitted) == 2 and step.adapter_loads == 2
    core.add(Seq("a2", 0, 8, 1, adapter="lora-a"))
    again = core.step(step.end_ns)
    assert again is not None and again.adapter_loads == 0  # lora-a stayed in its slot
    core.add(Seq("c", 0, 8, 1, adapter="lora-c"))
    third = core.step(again.end_ns)  # c evicts the least recently used (lora-b)
    assert third is not None and third.adapter_loads == 1
    core.add(Seq("b2", 0, 8, 1, adapter="lora-b"))
    fourth = core.step(third.end_ns)
    assert fourth is not None and fourth.adapter_loads == 1  # lora-b was evicted


def test_the_simulator_serves_its_adapters_and_refuses_other_names() -> None:
    def parse(model: str) -> str:
        body = json.dumps(
            {"model": model, "stream": True, "messages": [{"role": "user", "content": "hi"}]}
        ).encode()
        request = parse_request(
            body,
            "chat",
            request_id="r",
            default_model="base",
            default_max_tokens=8,
            arrival_perf_ns=0,
            adapters=("lora-a",),
        )
        return request.model

    assert parse("lora-a") == "lora-a" and parse("base") == "base"
    with pytest.raises(RequestError) as refused:
        parse("lora-z")
    assert refused.value.status == 404


def test_the_tpot_tab_has_rows_per_model() -> None:
    totals = _recorded({("chat", "lora-a"): 3, ("chat", "lora-b"): 1})
    state = SimpleNamespace(
        collector=SimpleNamespace(totals=totals, sections=LiveSections(("tpot",)))
    )
    scopes = {row["name"] for row in tab_rows(state)}  # type: ignore[arg-type]
    assert scopes == {"All", "chat", "model lora-a", "model lora-b"}
