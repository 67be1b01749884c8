"""Iteration-level scheduler of a simulated serving engine (continuous batching, vLLM V1-like).

Pure logic on an integer nanosecond clock that the caller supplies: the real-time server
(``engine_loop``) and the deterministic virtual-time runner (``virtual``) drive the same
``EngineCore``, so what the tests prove about scheduling holds for the server.

One ``step(start_ns)`` is one engine iteration:

1. Running sequences, oldest first: a decoding one gets one token, a partly prefilled one
   (chunked prefill) the next chunk that fits the step's token budget. A sequence that needs a
   KV block when none is free preempts the newest running sequence (recompute: its KV is
   dropped and it goes back to the front of the queue; later it re-prefills prompt + the tokens
   it had already produced), as vLLM does; if it is itself the newest, it is the one preempted.
2. Waiting sequences, first come first served, while fewer than ``max_num_seqs`` run, the
   token budget lasts and free KV blocks cover the new prefill (none are admitted in a step
   that preempted). With chunked prefill a prompt is split to fit the budget (decode tokens
   count against it too); without, a prompt is prefilled whole in one step: it is admitted
   when it fits what is left of the budget, or alone when it is the step's first prefill.
   A request the prefix cache served in part (``prefix_cache``) prefills only the rest,
   the first time (a recompute after preemption prefills it all).
   A request of a LoRA adapter is passed over while the batch holds ``max_loras`` other
   adapters (``adapters``); later requests may then go first, as in vLLM.
3. The step's duration comes from the profile's cost model (``profiles``, with the load of
   each adapter it brought into a GPU slot), and every token it
   produced (one per decoding sequence, the first token of each sequence whose prefill it
   completed) is emitted at its end, at one instant.
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass
from typing import Any, Protocol

from .adapters import AdapterSlots
from .profiles import EngineParams

WAITING, RUNNING, DONE = 0, 1, 2


class TokenSink(Protocol):
    """Where a sequence's tokens go in real time (``engine_stream.EngineStream``): the
    engine loop calls ``emit`` at the end of each step that gave it a token."""

    @property
    def active(self) -> bool: ...

    def emit(self, step: int, due_ns: int) -> None:
        """The token of ``step``, which was to end at ``due_ns`` (perf ns)."""


class Seq:
    """One request inside the engine. Times are on the caller's clock (ns)."""

    __slots__ = (
        "request_id",
        "arrival_ns",
        "ready_ns",
        "prompt",
        "total",
        "generated",
        "computed",
        "target",
        "blocks",
        "state",
        "sink",
        "scheduled_ns",
        "prefill_start_ns",
        "prefill_end_ns",
        "preemptions",
        "adapter",
        "cached",
        "offloaded",
    )

    def __init__(
        self,
        request_id: str,
        arrival_ns: int,
        prompt_tokens: int,
        output_tokens: int,
        ready_ns: int | None = None,
        sink: TokenSink | None = None,
        adapter: str | None = None,
        cached: int = 0,
    ) -> None:
        if prompt_tokens < 1 or output_tokens < 1:
            raise ValueError("a request needs at least one prompt and one output token")
        self.request_id = request_id
        self.arrival_ns = arrival_ns
        self.ready_ns = arrival_ns if ready_ns is None else ready_ns  # enters the queue
        self.prompt = prompt_tokens
        self.total = output_tokens
        self.generated = 0  # tokens produced (emitted) so far
        self.computed = 0  # tokens whose KV is in the cache
        self.target = prompt_tokens  # tokens to prefill before decoding (prompt + recomputed)
        self.blocks = 0
        self.state = WAITING
        self.sink = sink  # the real-time server's stream; None in virtual time
        self.scheduled_ns: int | None = None  # start of the first step that scheduled it
        self.prefill_start_ns: int | None = None
        self.prefill_end_ns: int | None = None
        self.preemptions: list[dict[str, Any]] = []
        self.adapter = adapter  # the LoRA adapter it asked for; None: the base model
        self.cached = cached  # prompt tokens the prefix cache holds: its first prefill skips them
        self.offloaded = 0  # tokens of its KV in CPU memory (preempted with offloading on)

    @property
    def finished(self) -> bool:
        return self.generated >= self.total

    def truth_fields(self, offset_ns: int) -> dict[str, object]:
        """Engine additions to the request's truth line (stamps on the truth file's scale)."""

        def wall(value: int | None) -> int | None:
            return None if value is None else value + offset_ns

        return {
            "scheduled_ns": wall(self.scheduled_ns),
            "queue_ns": None if self.scheduled_ns is None else self.scheduled_ns - self.arrival_ns,
            "prefill_start_ns": wall(self.prefill_start_ns),
            "prefill_end_ns": wall(self.prefill_end_ns),
            "preemptions": [
                {k: wall(v) if k.endswith("_ns") else v for k, v in p.items()}
                for p in self.preemptions
            ],
        }


@dataclass(slots=True)
class Step:
    index: int
    start_ns: int
    end_ns: int
    emitted: list[Seq]  # in emission order; each gets exactly one token at end_ns
    finished: list[Seq]
    preempted: list[Seq]
    decode: int
    prefill_tokens: int
    prefill_seqs: int
    stall_ns: int
    gc: bool  # the stall was a full collection of the server's Python process
    throttle_ns: int  # the time the GPU's lowered clocks added to the step
    offload_ns: int  # KV moved to or from CPU memory in it (PCIe time)
    prefill_ns: int  # the part of the step's cost its prefill tokens made (truth of cause)
    recompute_ns: int  # the part of that which recomputed preempted sequences
    running: int  # after the step
    waiting: int
    kv_tokens: int  # KV blocks in use after scheduling, in tokens
    lag_ns: int = 0  # real time only: how late the step's start was when it was re-anchored
    first_prompt_tokens: int = 0  # prompts of the requests that got their first token in it
    adapter_loads: int = 0  # LoRA adapters it loaded into a GPU slot (each adapter_load_ms)

    def record(self, offset_ns: int = 0) -> dict[str, object]:
        """The step's truth line: no ``request_id`` key, so per-request readers skip it."""
        return {
            "type": "step",
            "step": self.index,
            "start_ns": self.start_ns + offset_ns,
            "end_ns": self.end_ns + offset_ns,
            "decode": self.decode,
            "prefill_tokens": self.prefill_tokens,
            "prefill_seqs": self.prefill_seqs,
            "emitted": len(self.emitted),
            "finished": len(self.finished),
            "running": self.running,
            "waiting": self.waiting,
            "kv_tokens": self.kv_tokens,
            "stall_ns": self.stall_ns,
            "gc": self.gc,
            "throttle_ns": self.throttle_ns,
            "offload_ns": self.offload_ns,
            "prefill_ns": self.prefill_ns,
            "recompute_ns": self.recompute_ns,
            "preempted": [s.request_id for s in self.preempted],
            "lag_ns": self.lag_ns,
            "adapter_loads": self.adapter_loads,
            "perf_offset_ns": offset_ns,
        }


class EngineCore:
    """Queue, running batch, KV blocks and the step cost model."""

    def __init__(self, params: EngineParams, seed: int = 0) -> None:
        self.params = params
        self.waiting: deque[Seq] = deque()
        self.running: list[Seq] = []
        self.block_size = params.block_size
        self.total_blocks = params.kv_cache_tokens // params.block_size
        self.free_blocks = self.total_blocks
        self.steps = 0
        self.preemptions = 0
        self._rng = random.Random(seed)
        self._stall = params.stall_distribution()
        # Cost model in ns.
        self._base = params.step_base_ms * 1e6
        self._per_decode = params.decode_ms_per_seq * 1e6
        self._per_ctx = params.kv_read_ms_per_ktoken * 1e3  # per cached token
        self._per_prefill = params.prefill_ms_per_token * 1e6
        self._per_pair = params.prefill_attn_ms_per_mpair  # per attention pair
        self._jitter = params.step_jitter
        self._stall_prob = params.stall_prob if self._stall is not None else 0.0
        self._gc_share = params.stall_gc_share
        self.gc_collections = 0  # planted stalls that were full collections (its /metrics)
        self._throttle = params.throttle_distribution()
        self._throttle_prob = params.throttle_prob if self._throttle is not None else 0.0
        self._throttled_until_ns = 0
        self.cpu_free_tokens = params.kv_offload_tokens  # CPU memory for offloaded KV
        self._ns_per_token = params.kv_bytes_per_token / params.pcie_gb_per_s  # bytes / (GB/s)
        self._moving_ns = 0.0  # KV moved to or from CPU memory in the step being built
        self.kv_loaded_bytes = 0  # brought back (the server's kv_offload_load_bytes)
        self.kv_stored_bytes = 0
        self.throttled = False  # the last step ran with the GPU's clocks held down (DCGM page)
        self.adapters = AdapterSlots(params.max_loras, round(params.adapter_load_ms * 1e6))
        self._adapters_asked = False  # no step looks at adapters until a request names one

    # -- queue ------------------------------------------------------------------------------

    def add(self, seq: Seq) -> None:
        """Queue a request (callers add in arrival order)."""
        self.waiting.append(seq)
        self._adapters_asked = self._adapters_asked or seq.adapter is not None

    def abort(self, seq: Seq) -> None:
        """The client went away: drop the request and free its KV blocks."""
        if seq.state == RUNNING:
            self.running.remove(seq)
        elif seq.state == WAITING:
            try:
                self.waiting.remove(seq)
            except ValueError:
                pass
        self.free_blocks += seq.blocks
        seq.blocks = 0
        self.cpu_free_tokens += seq.offloaded
        seq.offloaded = 0
        seq.state = DONE

    @property
    def idle(self) -> bool:
        return not self.running and not self.waiting

    def next_ready_ns(self) -> int | None:
        """When the head of the queue may be admitted (None: nothing waits)."""
        return self.waiting[0].ready_ns if self.waiting else None

    def max_tokens_for(self, prompt_tokens: int) -> int:
        return self.params.max_model_len - prompt_tokens

    # -- one iteration -----------------------------------------------------------------------

    def _throttled(self, start_ns: int, cost: float) -> int:
        """The time a throttle episode adds to a step of ``cost`` ns starting at
        ``start_ns``; an episode starts with ``throttle_prob`` a step (drawn only then)."""
        if not self._throttle_prob:
            return 0
        if start_ns >= self._throttled_until_ns and self._rng.random() < self._throttle_prob:
            assert self._throttle is not None
            episode_ms = max(0.0, self._throttle.sample(self._rng))
            self._throttled_until_ns = start_ns + round(episode_ms * 1e6)
        self.throttled = start_ns < self._throttled_until_ns
        return round(cost * (self.params.throttle_factor - 1)) if self.throttled else 0

    def _move(self, tokens: int, stored: bool) -> None:
        """KV of ``tokens`` over PCIe in the step being built (to CPU memory or back)."""
        self._moving_ns += tokens * self._ns_per_token
        moved = round(tokens * self.params.kv_bytes_per_token)
        if stored:
            self.kv_stored_bytes += moved
        else:
            self.kv_loaded_bytes += moved

    def _prefill_cost(self, tokens: float, pairs: float) -> float:
        """ns of step cost for ``tokens`` of prefill with ``pairs`` causal attention pairs."""
        return self._per_prefill * tokens + self._per_pair * pairs

    def _preempt(self, victim: Seq, at_ns: int, preempted: list[Seq]) -> None:
        self.running.pop()  # the victim is always the newest, the last
        self.free_blocks += victim.blocks
        victim.blocks = 0
        if victim.computed and victim.computed <= self.cpu_free_tokens:  # offloaded, not lost
            self.cpu_free_tokens -= victim.computed
            victim.offloaded = victim.computed
            self._move(victim.computed, stored=True)
        victim.computed = 0
        victim.target = victim.prompt + victim.generated
        victim.state = WAITING
        victim.preemptions.append({"at_ns": at_ns, "generated": victim.generated})
        self.waiting.appendleft(victim)
        self.preemptions += 1
        preempted.append(victim)

    def step(self, start_ns: int) -> Step | None:
        """Schedule and cost one iteration starting at ``start_ns``; None when there is no work.

        State is advanced at once (tokens counted, finished requests freed): the next step
        starts at the returned ``end_ns``, which is also when the emitted tokens are sent.
        """
        params = self.params
        self._moving_ns = 0.0
        chunked = params.chunked_prefill
        budget = params.max_num_batched_tokens
        bs = self.block_size
        running = self.running
        emitted: list[Seq] = []
        preempted: list[Seq] = []
        prefilling: list[Seq] = []  # sequences that got prefill work
        decode = prefill_tokens = ctx = 0
        pairs = 0.0
        recompute = 0.0  # the cost of prefill work that recomputes preempted sequences

        i = 0
        while i < len(running):
            seq = running[i]
            computed = seq.computed
            if computed >= seq.target:  # decoding: one token
                if chunked:
                    if budget < 1:
                        i += 1
                        continue
                n = 1
            else:  # a partly prefilled prompt (chunked prefill only)
                n = min(seq.target - computed, budget)
                if n < 1:
                    i += 1
                    continue
            need = (computed + n + bs - 1) // bs - seq.blocks
            if need > self.free_blocks:
                while need > self.free_blocks:
                    victim = running[-1]
                    self._preempt(victim, start_ns, preempted)
                    if victim is seq:
                        break
                if seq.state != RUNNING:
                    break  # it was the newest: nothing after it runs either
            self.free_blocks -= need
            seq.blocks += need
            if computed >= seq.target:
                decode += 1
                ctx += computed
                seq.computed = computed + 1
                emitted.append(seq)
                if chunked:
                    budget -= 1
            else:
                budget -= n
                prefill_tokens += n
                pairs += n * computed + n * n / 2
                if seq.preemptions:
                    recompute += self._prefill_cost(n, n * computed + n * n / 2)
                seq.computed = computed + n
                prefilling.append(seq)
                if seq.computed >= seq.target:
                    emitted.append(seq)
            i += 1

        load_ns, loads_before = 0, self.adapters.loads
        adapters_in_batch = (
            AdapterSlots.in_batch(seq.adapter for seq in running) if self._adapters_asked else set()
        )
        if not preempted:
            waiting = self.waiting
            max_seqs = params.max_num_seqs
            first_prefill = not prefilling
            index = 0
            while index < len(waiting) and len(running) < max_seqs and budget > 0:
                seq = waiting[index]
                if seq.ready_ns > start_ns:
                    break
                if not self.adapters.admits(seq.adapter, adapters_in_batch):
                    index += 1  # passed over: its adapter would be one too many
                    continue
                reused = seq.cached if seq.scheduled_ns is None else seq.offloaded
                n = seq.target - reused
                if n > budget:
                    if chunked:
                        n = budget
                    elif not first_prefill:
                        break  # a whole prompt waits for a step with room for it
                need = (reused + n + bs - 1) // bs
                if need > self.free_blocks:
                    break
                del waiting[index]
                if seq.offloaded:  # its KV comes back from CPU memory: no recompute of it
                    self._move(seq.offloaded, stored=False)
                    self.cpu_free_tokens += seq.offloaded
                    seq.offloaded = 0
                if seq.adapter is not None:
                    adapters_in_batch.add(seq.adapter)
                load_ns += self.adapters.activate(seq.adapter, adapters_in_batch)
                first_prefill = False
                self.free_blocks -= need
                seq.blocks = need
                seq.state = RUNNING
                running.append(seq)
                if seq.scheduled_ns is None:
                    seq.scheduled_ns = start_ns
                budget -= n
                prefill_tokens += n
                pairs += n * reused + n * n / 2
                if seq.preemptions:
                    recompute += self._prefill_cost(n, n * reused + n * n / 2)
                seq.computed = reused + n
                prefilling.append(seq)
                if seq.computed >= seq.target:
                    emitted.append(seq)

        if not emitted and not prefilling:
            return None

        for seq in prefilling:  # a prefill starts when its first chunk runs
            if _first_chunk(seq):
                if seq.preemptions:
                    seq.preemptions[-1]["prefill_start_ns"] = start_ns
                else:
                    seq.prefill_start_ns = start_ns

        prefill_cost = self._prefill_cost(prefill_tokens, pairs)
        cost = self._base + self._per_decode * decode + self._per_ctx * ctx + prefill_cost
        rng = self._rng
        if self._jitter:
            scale = max(0.1, 1.0 + rng.gauss(0.0, self._jitter))
            cost, prefill_cost, recompute = cost * scale, prefill_cost * scale, recompute * scale
        stall_ns, gc = 0, False
        if self._stall_prob and rng.random() < self._stall_prob:
            assert self._stall is not None
            stall_ns = round(max(0.0, self._stall.sample(rng)) * 1e6)
            gc = bool(self._gc_share) and rng.random() < self._gc_share
            self.gc_collections += gc
        throttle_ns = self._throttled(start_ns, cost)
        offload_ns = round(self._moving_ns)
        end_ns = start_ns + round(cost) + throttle_ns + stall_ns + load_ns + offload_ns

        finished: list[Seq] = []
        first_prompt = 0
        for seq in emitted:
            if seq.computed == seq.target:  # this step completed a prefill
                if seq.preemptions:
                    seq.preemptions[-1]["prefill_end_ns"] = end_ns
                if seq.prefill_end_ns is None:  # the prefill that gave the first token
                    seq.prefill_end_ns = end_ns
                    first_prompt += seq.prompt
            seq.generated += 1
            if seq.generated >= seq.total:
                finished.append(seq)
                seq.state = DONE
                self.free_blocks += seq.blocks
                seq.blocks = 0
        if finished:
            self.running = [s for s in running if s.state == RUNNING]
        step = Step(
            index=self.steps,
            start_ns=start_ns,
            end_ns=end_ns,
            emitted=emitted,
            finished=finished,
            preempted=preempted,
            decode=decode,
            prefill_tokens=prefill_tokens,
            prefill_seqs=len(prefilling),
            stall_ns=stall_ns,
            gc=gc,
            throttle_ns=throttle_ns,
            offload_ns=offload_ns,
            prefill_ns=round(prefill_cost),
            recompute_ns=round(recompute),
            running=len(self.running),
            waiting=len(self.waiting),
            kv_tokens=(self.total_blocks - self.free_blocks) * bs,
            first_prompt_tokens=first_prompt,
            adapter_loads=self.adapters.loads - loads_before,
        )
        self.steps += 1
        return step


def _first_chunk(seq: Seq) -> bool:
    """True when no earlier step started the current prefill (its start is not recorded)."""
    if seq.preemptions:
        return "prefill_start_ns" not in seq.preemptions[-1]
    return seq.prefill_start_ns is None
