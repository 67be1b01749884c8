"""A request's way in: its body read into a ``SimRequest`` (the prompt counted in words or
a tokenizer's tokens), checked against what this server serves, its length decided, and its
prompt looked up in the prefix cache (``--prefix-cache``).

A long prompt counted with a tokenizer takes 30-60 ms: on the loop it would hold every
stream's next token (an engine's tokenizer runs beside its decode loop), so the server has
large bodies read on a thread of their own (``read_apart``), which releases the GIL.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path

from ..apis import dialect_named, dialects
from ..common.distributions import Distribution, sample_int
from ..common.tokens import load_tokenizer
from .prefix_cache import PrefixCache, PromptUnits, Units
from .profiles import EngineParams
from .request import Api, RequestError, SimRequest, count_words, decide_length, parse_request

# the APIs whose streams can carry the simulator's reasoning tokens
REASONING_PATHS = tuple(dialect.path for dialect in dialects() if dialect.sim_reasoning)


class RequestIntake:
    """Reads and admits requests for one server, with its own random draws (seeded)."""

    def __init__(
        self,
        *,
        model: str,
        adapters: tuple[str, ...],
        default_max_tokens: int,
        natural_tokens: Distribution,
        reasoning_tokens: Distribution | None,
        seed: int,
        tokenizer_path: Path | None,
        prefix_cache: bool,
        engine: EngineParams | None,
    ) -> None:
        self._model = model
        self._adapters = adapters
        self._default_max_tokens = default_max_tokens
        self._natural_tokens = natural_tokens
        self._reasoning_tokens = reasoning_tokens
        self._max_model_len = engine.max_model_len if engine is not None else None
        tokenizer = load_tokenizer(tokenizer_path) if tokenizer_path else None
        self._count_text = tokenizer.count if tokenizer is not None else count_words
        self._count_unlocked = tokenizer.count_unlocked if tokenizer is not None else None
        # --prefix-cache: prompts as the tokens a cache hashes (words, or the tokenizer's
        # ids: the thread's own encode for large bodies), looked up on the loop
        self._units: Units = tokenizer.ids if tokenizer is not None else str.split
        self._units_unlocked: Units | None = tokenizer.ids_unlocked if tokenizer else None
        self.prefix_cache: PrefixCache | None = None
        if prefix_cache:
            self.prefix_cache = (
                PrefixCache(engine.block_size, engine.kv_cache_tokens // engine.block_size)
                if engine is not None
                else PrefixCache(16)
            )
        self._counting: ThreadPoolExecutor | None = None
        self._natural_rng = random.Random(seed + 1_000_003)
        self._reasoning_rng = random.Random(seed + 2_000_003)  # its own: other draws stay

    @property
    def reads_apart(self) -> bool:
        """Whether large bodies are to be read on the counting thread (with a tokenizer)."""
        return self._count_unlocked is not None

    def read(self, body: bytes, api: Api, arrival: int, request_id: str) -> SimRequest:
        """Parse and count a body on the loop; raises ``RequestError`` for an error reply."""
        return self._parse(body, api, arrival, request_id, self._count_text, self._units)

    def read_apart(
        self, body: bytes, api: Api, arrival: int, request_id: str
    ) -> asyncio.Future[SimRequest]:
        """``read`` on the counting thread (only when ``reads_apart``)."""
        assert self._count_unlocked is not None
        if self._counting is None:
            self._counting = ThreadPoolExecutor(1, thread_name_prefix="sim-count")
        parse = partial(
            self._parse, body, api, arrival, request_id, self._count_unlocked, self._units_unlocked
        )
        return asyncio.get_running_loop().run_in_executor(self._counting, parse)

    def _parse(
        self,
        body: bytes,
        api: Api,
        arrival: int,
        request_id: str,
        count_text: Callable[[str], int],
        units: Units | None = None,
    ) -> SimRequest:
        """With a prefix cache, the prompt is counted as the tokens it keeps (``units``)."""
        prompt = PromptUnits(units) if self.prefix_cache is not None and units else None
        request = parse_request(
            body,
            api,
            request_id=request_id,
            default_model=self._model,
            adapters=self._adapters,
            default_max_tokens=self._default_max_tokens,
            arrival_perf_ns=arrival,
            count_text=prompt or count_text,
        )
        if prompt is not None:
            request.prompt_units = prompt.units
        return request

    def admit(self, request: SimRequest) -> str:
        """Check that this server can answer the request (else ``RequestError``), decide
        its length and look its prompt up; returns its response's id."""
        dialect = dialect_named(request.api)
        reasoning = self._reasoning_tokens
        if reasoning is not None and not dialect.sim_reasoning:
            raise RequestError(
                f"the simulator's --reasoning-tokens (scenario: simulator.reasoning_tokens) "
                f"has no form in {dialect.path}: it has no reasoning channel (serve "
                f"reasoning over {', '.join(REASONING_PATHS)})"
            )
        limit = self._max_model_len
        if limit is not None:
            asked = request.prompt_tokens + request.max_tokens
            if asked > limit:
                raise RequestError(
                    f"This model's maximum context length is {limit} tokens. However, you "
                    f"requested {asked} tokens ({request.prompt_tokens} in the messages, "
                    f"{request.max_tokens} in the completion). Please reduce the length of "
                    "the messages or completion."
                )
        drawn = 0 if reasoning is None else sample_int(reasoning, self._reasoning_rng, minimum=0)
        decide_length(request, self._natural_tokens, self._natural_rng, drawn)
        if self.prefix_cache is not None and request.prompt_units is not None:
            request.cached_tokens = self.prefix_cache.cached_tokens(request.prompt_units)
            request.prompt_units = None  # looked up: the cache keeps only its hashes
        return dialect.sim_id_prefix + request.request_id

    def close(self) -> None:
        if self._counting is not None:
            self._counting.shutdown(wait=False, cancel_futures=True)
