"""A run's token counts for the summary and the report: prompt tokens requested against
those the server counted, the prefix cache's hits, reasoning against answer tokens, and
where the per-event counts came from."""

from __future__ import annotations

from tpot_locust.common.text_safety import printable
from tpot_locust.common.timings import ESTIMATED_COUNT_SOURCE
from tpot_locust.metrics.metric_set import ClassCounters
from tpot_locust.report.summary_types import PromptCache, PromptComparison, TokenCounts
from tpot_locust.report.truth_check import signed


def prompt_comparison(counters: ClassCounters) -> PromptComparison | None:
    """Requested against server-counted prompt tokens, over the requests whose usage had
    both (None when none had)."""
    requests = counters.prompt_compared_requests
    if not requests:
        return None
    requested, reported = counters.prompt_compared_requested, counters.prompt_compared_reported
    return {
        "requests": requests,
        "requested": requested,
        "reported": reported,
        "mean_difference": round((reported - requested) / requests, 2),
        "max_difference": counters.prompt_difference_max,
        "ratio": round(reported / requested, 3) if requested else None,
    }


def prompt_cache(counters: ClassCounters) -> PromptCache | None:
    """The server's prefix-cache hits over the requests whose usage counted them (None
    when none did): a hit rate of cached / prompt tokens, both from those requests only."""
    requests = counters.cache_reported_requests
    if not requests:
        return None
    cached, prompt = counters.cached_prompt_tokens, counters.cache_reported_prompt_tokens
    return {
        "requests": requests,
        "cached": cached,
        "prompt": prompt,
        "hit_rate": round(cached / prompt, 4) if prompt else None,
    }


def reasoned(tokens: TokenCounts) -> bool:
    """Whether any request had reasoning tokens (finished, or in the window): only then is
    TTFAT not just TTFT."""
    return bool(tokens.get("reasoning_requests") or tokens.get("window_reasoning"))


def format_token_kinds(tokens: TokenCounts) -> list[str]:
    """Reasoning against answer tokens, the prefix cache's hits and where per-event counts
    came from: each line only where there is something to say."""
    lines = []
    if tokens.get("reasoning_requests"):
        lines.append(
            f"reasoning tokens {tokens['reasoning']:,} in {tokens['reasoning_requests']:,} "
            f"requests, answer tokens {tokens['answer']:,} (TTFAT: to the first answer token)"
        )
    if window_reasoning := tokens.get("window_reasoning"):
        answer = tokens.get("window_answer", 0)
        lines.append(
            f"in the window: reasoning tokens {window_reasoning:,} "
            f"({window_reasoning / max(window_reasoning + answer, 1):.0%}), answer tokens "
            f"{answer:,} (every stream's, finished or not)"
        )
    if cache := tokens.get("prompt_cache"):
        rate = "-" if cache["hit_rate"] is None else f"{cache['hit_rate'] * 100:.1f} %"
        lines.append(
            f"prefix cache: {cache['cached']:,} of {cache['prompt']:,} prompt tokens cached "
            f"({rate}), over the {cache['requests']:,} requests that reported a cached count"
        )
    sources = tokens.get("count_source") or {}
    if len(sources) > 1 or ESTIMATED_COUNT_SOURCE in sources:
        counted = ", ".join(f"{printable(name)} {count:,}" for name, count in sources.items())
        estimate = sources.get(ESTIMATED_COUNT_SOURCE)
        note = f"; {ESTIMATED_COUNT_SOURCE}: one token per event assumed" if estimate else ""
        lines.append(f"tokens per event counted from (requests): {counted}{note}")
    return lines


def format_prompt_tokens(tokens: TokenCounts) -> str | None:
    """Requested against server-counted prompt tokens: our prompts are sized in words (an
    estimate), which the server's tokenizer counts its own way."""
    prompt = tokens.get("prompt")
    if not prompt:
        return None
    return (
        f"prompt tokens: requested {prompt['requested']:,}, the server counted "
        f"{prompt['reported']:,} ({prompt['ratio']:.2f}x; per request "
        f"{signed(prompt['mean_difference'], 1)} on average, at most "
        f"{prompt['max_difference']:,} apart)"
    )
