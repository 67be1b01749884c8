"""Each engine's names for our series: the only place that knows them (vLLM, SGLang, TGI).

``server_metrics`` reads a scrape through the dialect whose prefix its names carry. A name
that is missing leaves that series None: older engines, flags left off, other engines.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from tpot_locust.common.metric_catalogue import ITL, TTFT

GAUGES = ("running", "waiting", "kv_usage")
# kv_loaded_total: KV cache brought back to the GPU from CPU memory (an offloading server's
# swap-in; bytes for vLLM, tokens for SGLang's HiCache: only its rises are read);
# kv_stored_total: KV cache moved from the GPU to CPU memory (vLLM's swap-out, bytes)
COUNTERS = (
    "preemptions_total",
    "prompt_tokens_total",
    "generation_tokens_total",
    "gc_collections_total",
    "kv_loaded_total",
    "kv_stored_total",
)
SERIES = GAUGES + COUNTERS
HISTOGRAMS = (ITL.name, TTFT.name, "queue_time", "prefill_time", "decode_time")


@dataclass(frozen=True)
class EngineNames:
    """One engine's names for our series: the only place that knows them.

    ``series`` and ``histograms`` map our name to the engine's sample names (histograms:
    the base name before ``_bucket``) in order of preference: the first present wins, so
    an engine exporting a new name beside its deprecated alias is not counted twice.
    ``kv_ratio`` (used tokens, capacity) is a fallback for ``kv_usage`` where the engine
    exports no fraction."""

    engine: str
    prefix: str
    series: Mapping[str, tuple[str, ...]]
    histograms: Mapping[str, tuple[str, ...]]
    kv_ratio: tuple[str, str] | None = None


VLLM = EngineNames(
    engine="vllm",
    prefix="vllm:",
    series=MappingProxyType(
        {
            "running": ("vllm:num_requests_running",),
            "waiting": ("vllm:num_requests_waiting",),
            # block fraction 0..1 despite "perc"; gpu_cache_usage_perc before vLLM 0.10
            "kv_usage": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
            "preemptions_total": ("vllm:num_preemptions_total",),
            "prompt_tokens_total": ("vllm:prompt_tokens_total",),
            "generation_tokens_total": ("vllm:generation_tokens_total",),
            # the OffloadingConnector (--kv-offloading-size): bytes loaded from CPU memory
            # (vllm/distributed/kv_transfer/kv_connector/v1/offloading/metrics.py)
            "kv_loaded_total": ("vllm:kv_offload_load_bytes_total",),
            # ... and bytes stored to it (a preempted sequence's KV swapped out)
            "kv_stored_total": ("vllm:kv_offload_store_bytes_total",),
        }
    ),
    histograms=MappingProxyType(
        {
            # time_per_output_token_seconds was ITL under its old name (deprecated in 0.10)
            ITL.name: ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"),
            TTFT.name: ("vllm:time_to_first_token_seconds",),
            "queue_time": ("vllm:request_queue_time_seconds",),
            "prefill_time": ("vllm:request_prefill_time_seconds",),
            "decode_time": ("vllm:request_decode_time_seconds",),
        }
    ),
)

SGLANG = EngineNames(
    engine="sglang",
    prefix="sglang:",
    series=MappingProxyType(
        {
            "running": ("sglang:num_running_reqs",),
            "waiting": ("sglang:num_queue_reqs",),
            # a *token* fraction of the KV pool (num_used_tokens / max_total_num_tokens), one
            # per scheduler rank; vLLM's is a block fraction
            "kv_usage": ("sglang:token_usage",),
            # SGLang calls preemption "retraction"; older versions export no counter of it
            "preemptions_total": ("sglang:num_retracted_requests_total",),
            "prompt_tokens_total": ("sglang:prompt_tokens_total",),
            "generation_tokens_total": ("sglang:generation_tokens_total",),
            # HiCache (--enable-hierarchical-cache): host DRAM back to the GPU
            # (python/sglang/srt/observability/metrics_collector.py)
            "kv_loaded_total": ("sglang:load_back_bytes_total", "sglang:load_back_tokens_total"),
        }
    ),
    histograms=MappingProxyType(
        {
            # older versions export only the per-request TPOT histogram
            ITL.name: (
                "sglang:inter_token_latency_seconds",
                "sglang:time_per_output_token_seconds",
            ),
            TTFT.name: ("sglang:time_to_first_token_seconds",),
            "queue_time": ("sglang:queue_time_seconds",),
        }
    ),
    kv_ratio=("sglang:num_used_tokens", "sglang:max_total_num_tokens"),
)

TGI = EngineNames(
    engine="tgi",
    prefix="tgi_",
    series=MappingProxyType(
        {
            "running": ("tgi_batch_current_size",),
            "waiting": ("tgi_queue_size",),
            # no KV usage gauge and no preemption counter; token counts only as the sums of
            # the per-request length histograms (monotonic, added when a request finishes)
            "prompt_tokens_total": ("tgi_request_input_length_sum",),
            "generation_tokens_total": ("tgi_request_generated_tokens_sum",),
        }
    ),
    histograms=MappingProxyType(
        {
            # one mean time per token per request (TPOT), not each gap: coarser than ITL
            ITL.name: ("tgi_request_mean_time_per_token_duration",),
            # TGI has no TTFT histogram, and its prefill/decode histograms time batches
            "queue_time": ("tgi_request_queue_duration",),
        }
    ),
)

DIALECTS = (VLLM, SGLANG, TGI)  # detection order: a vLLM exporting TGI names too is vLLM
