"""Prefix sharing, checked where it matters: on the prompts the simulator received (issue
31, items 1 and 2). The simulator's prefix cache (``--prefix-cache``, vLLM's chained
16-token block hashes over the tokenizer's ids) finds in each prompt exactly the leading
tokens an earlier prompt had: for a published trace, the blocks its ``hash_ids`` share;
for a class's ``shared_prefix_tokens``, that prefix. And the hit rate the client reports
from the servers' ``cached_tokens`` is the simulator's own."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import ROOT, run_scenario, truth_requests
from tests.helpers.small_tokenizer import build_tokenizer
from tests.process.test_published_traces import SAMPLES as PUBLISHED_SAMPLES
from tpot_locust.scenario.model import TraceSpec
from tpot_locust.scenario.trace import TraceRequest
from tpot_locust.scenario.trace_formats import load_trace_spec

BLOCK = 16  # the simulator's prefix-cache block (vLLM's default block size)
# the samples whose prompts are built from prefix blocks (``hash_ids``)
SAMPLES = {fmt: PUBLISHED_SAMPLES[fmt] for fmt in ("mooncake", "bailian")}


def block_sizes(request: TraceRequest) -> list[tuple[int, int]]:
    """The request's prompt as (block id, tokens of it): whole blocks, the last cut."""
    assert request.input_tokens is not None
    last = request.input_tokens - (len(request.blocks) - 1) * request.block_tokens
    sizes = [request.block_tokens] * (len(request.blocks) - 1) + [last]
    return list(zip(request.blocks, sizes, strict=True))


def expected_cached(requests: list[TraceRequest]) -> list[int]:
    """Per request, in time order: the leading tokens it shares with any earlier one (the
    blocks whose ids and sizes agree), in whole cache blocks, its last token never."""
    cached, seen = [], []
    for request in requests:
        blocks = block_sizes(request)
        shared = 0
        for earlier in seen:
            tokens = 0
            for mine, theirs in zip(blocks, earlier, strict=False):
                if mine != theirs:
                    break
                tokens += mine[1]
            shared = max(shared, tokens)
        assert request.input_tokens is not None
        cached.append(min(shared // BLOCK * BLOCK, (request.input_tokens - 1) // BLOCK * BLOCK))
        seen.append(blocks)
    return cached


@pytest.mark.parametrize("fmt", sorted(SAMPLES))
def test_requests_sharing_hash_ids_share_exactly_those_leading_tokens(
    tmp_path: Path, fmt: str
) -> None:
    trace = ROOT / "scenarios" / "traces" / SAMPLES[fmt]
    _, requests = load_trace_spec(TraceSpec(file=str(trace)))
    requests = sorted(requests, key=lambda request: request.t_s)
    wanted = expected_cached(requests)
    assert any(wanted), wanted  # the sample shares prefixes at all
    tokenizer = build_tokenizer(tmp_path / "tokenizer")
    scenario = tmp_path / "replay.yaml"
    scenario.write_text(
        f"name: prefix-{fmt}\nduration: 8s\n"
        f"server: {{include_usage: true, tokenizer: {tokenizer}}}\n"
        f"classes:\n  replay:\n    trace: {{file: {trace}, format: {fmt}}}\n"
        "simulator: {ttft_ms: 5, gap_ms: 1, prefix_cache: true}\n"
    )
    out = tmp_path / "out"
    summary, _ = run_scenario(scenario, out)
    received = truth_requests(out)
    assert [r["prompt_tokens"] for r in received] == [r.input_tokens for r in requests]
    assert [r["cached_tokens"] for r in received] == wanted
    cache = summary["tokens"]["prompt_cache"]
    assert (cache["requests"], cache["cached"]) == (len(requests), sum(wanted))


def test_a_class_shared_prefix_is_found_cached_in_every_session_but_the_first(
    tmp_path: Path,
) -> None:
    tokenizer = build_tokenizer(tmp_path / "tokenizer")
    scenario = tmp_path / "shared.yaml"
    scenario.write_text(
        f"name: shared-prefix\nduration: 4s\n"
        f"server: {{include_usage: true, tokenizer: {tokenizer}}}\n"
        "classes:\n  chat: {users: 2, prompt_tokens: 40, output_tokens: 4,"
        " shared_prefix_tokens: 256}\n"
        "simulator: {ttft_ms: 5, gap_ms: 1, prefix_cache: true}\n"
    )
    out = tmp_path / "out"
    summary, _ = run_scenario(scenario, out)
    received = [r for r in truth_requests(out) if not r["aborted"]]
    assert len(received) >= 10
    assert [r["prompt_tokens"] for r in received] == [256 + 40] * len(received)
    assert [r["cached_tokens"] for r in received] == [0] + [256] * (len(received) - 1)
    cache = summary["tokens"]["prompt_cache"]
    assert cache["hit_rate"] == round(cache["cached"] / cache["prompt"], 4)
    assert cache["cached"] == 256 * (cache["requests"] - 1)
