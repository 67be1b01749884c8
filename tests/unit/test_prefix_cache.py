"""The simulator's prefix cache (issue 31, items 1 and 2): chained block hashes as vLLM's,
what a request is told it found cached, and the engine's prefill of only the rest."""

from __future__ import annotations

import json
from pathlib import Path

from tpot_locust.apis import dialect_named
from tpot_locust.cli.embedded_simulator import simulator_args
from tpot_locust.scenario.schema import validate
from tpot_locust.scenario.yaml_source import Located
from tpot_locust.sim.chunks import sim_context
from tpot_locust.sim.engine import EngineCore, Seq
from tpot_locust.sim.prefix_cache import PrefixCache, PromptUnits
from tpot_locust.sim.profiles import EngineParams
from tpot_locust.sim.request import SimRequest


def words(count: int, tag: str, start: int = 0) -> list[str]:
    return [f"{tag}{index}" for index in range(start, start + count)]


def test_a_block_hits_only_when_every_token_to_its_end_was_seen() -> None:
    cache = PrefixCache(16)
    assert cache.cached_tokens(words(100, "a")) == 0  # nothing before it
    assert cache.cached_tokens(words(40, "a") + words(60, "b")) == 32  # 2 whole blocks shared
    assert cache.cached_tokens(words(100, "a")) == 96  # all six of its whole blocks
    assert cache.cached_tokens(words(96, "a")) == 80  # wholly cached: its last token computes
    # the same block after a different start is another block (chained hashes)
    assert cache.cached_tokens(words(16, "c") + words(84, "a", 16)) == 0


def test_the_least_recently_used_blocks_go_first() -> None:
    cache = PrefixCache(4, max_blocks=4)
    cache.cached_tokens(words(9, "a"))  # 2 blocks
    cache.cached_tokens(words(9, "b"))  # 2 more: full
    cache.cached_tokens(words(9, "a"))  # a's used again
    cache.cached_tokens(words(9, "c"))  # evicts b's
    assert cache.cached_tokens(words(9, "a")) == 8
    assert cache.cached_tokens(words(9, "b")) == 0


def test_prompt_units_count_what_they_keep() -> None:
    prompt = PromptUnits(str.split)
    assert prompt("one two three") + prompt("four") == 4
    assert prompt.units == ["one", "two", "three", "four"]


def test_the_engine_prefills_only_what_the_cache_did_not_hold() -> None:
    core = EngineCore(
        EngineParams(step_base_ms=5.0, prefill_ms_per_token=0.1, max_num_batched_tokens=512)
    )
    core.add(Seq("hit", 0, 100, 2, cached=96))
    core.add(Seq("miss", 0, 100, 2))
    step = core.step(0)
    assert step is not None and step.prefill_tokens == 4 + 100
    assert step.end_ns - step.start_ns == round((5.0 + 0.1 * 104) * 1e6)


def _usage_of(api: str, cached: int | None) -> dict:
    request = SimRequest(
        request_id="r",
        api=api,
        model="m",
        prompt_tokens=100,
        max_tokens=2,
        min_tokens=0,
        ignore_eos=True,
        stream=True,
        include_usage=True,
        continuous_usage=False,
        arrival_perf_ns=0,
        completion_tokens=2,
        cached_tokens=cached,
    )
    context = sim_context(request, "id", 0)
    (_, last), *_ = [
        event
        for event in dialect_named(api).sim_closing(context)
        if isinstance(event[1], dict) and event[1].get("usage")
    ]
    return last["usage"]


def test_usage_tells_the_cached_tokens_only_with_a_cache() -> None:
    assert _usage_of("chat", 64)["prompt_tokens_details"] == {"cached_tokens": 64}
    assert "prompt_tokens_details" not in _usage_of("chat", None)
    reading = dialect_named("chat").read({"usage": _usage_of("chat", 64)}, None)
    assert (reading.prompt, reading.cached) == (100, 64)
    assert json.dumps(_usage_of("completions", 16)).count('"cached_tokens": 16') == 1


def test_a_scenario_turns_the_cache_on_and_serves_its_classes_models() -> None:
    scenario = validate(
        Located(
            str(Path("x.yaml").resolve()),
            {
                "simulator": {"prefix_cache": True, "model": "base"},
                "classes": {
                    "chat": {"users": 1, "model": {"base": 1, "lora-a": 1}},
                    "other": {"users": 1, "model": "lora-b"},
                },
            },
            {},
        )
    )
    args = simulator_args(scenario)
    assert "--prefix-cache" in args and "True" not in args
    assert [args[i + 1] for i, arg in enumerate(args) if arg == "--adapter"] == [
        "base",
        "lora-a",
        "lora-b",
    ]  # fmt: skip (the simulator drops its own --model)
    off = validate(
        Located(
            str(Path("x.yaml").resolve()),
            {"simulator": {"prefix_cache": False}, "classes": {"chat": {"users": 1}}},
            {},
        )
    )
    assert "--prefix-cache" not in simulator_args(off)
