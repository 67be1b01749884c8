"""The simulator's prefix cache (``--prefix-cache``), as vLLM's automatic prefix caching
sees prompts: in blocks of ``block_tokens`` tokens, each block's hash chained to the one
before, so a block hits only when every token up to its end is the same as in an earlier
prompt. A request is told the tokens it found cached (``usage.prompt_tokens_details
.cached_tokens`` and each API's own field), and in engine mode it prefills only the rest.

Why: a published trace's ``hash_ids`` and a class's ``shared_prefix_tokens`` promise the
server shared leading tokens; the simulator checks the promise on what it received, and
the client's prefix-cache hit rate can be held to the simulator's truth.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence

# Blocks kept at most without an engine (whose KV capacity bounds it instead): 4M tokens
# of 16, some 40 MB of hashes; the least recently used go first.
DEFAULT_MAX_BLOCKS = 262_144

Units = Callable[[str], Sequence[Hashable]]


class PromptUnits:
    """A ``CountText`` that keeps what it counted: the prompt's tokens (words, or a
    tokenizer's ids) in the order the API's messages hold them."""

    def __init__(self, units: Units) -> None:
        self._units = units
        self.units: list[Hashable] = []

    def __call__(self, text: str) -> int:
        units = self._units(text)
        self.units.extend(units)
        return len(units)


class PrefixCache:
    """Chained block hashes of every prompt seen, least recently used first."""

    def __init__(self, block_tokens: int, max_blocks: int = DEFAULT_MAX_BLOCKS) -> None:
        self.block_tokens = block_tokens
        self.max_blocks = max_blocks
        self._blocks: OrderedDict[int, None] = OrderedDict()

    def cached_tokens(self, units: Sequence[Hashable]) -> int:
        """The leading tokens of ``units`` found in the cache, in whole blocks (and never
        the last token: a prompt wholly cached still computes one, as vLLM does); its
        blocks are then kept for later prompts."""
        size = self.block_tokens
        blocks, parent, hits, hitting = self._blocks, 0, 0, True
        for start in range(0, len(units) - size + 1, size):
            parent = hash((parent, tuple(units[start : start + size])))
            if hitting and parent in blocks:
                hits += 1
                blocks.move_to_end(parent)
                continue
            hitting = False
            blocks[parent] = None
            if len(blocks) > self.max_blocks:
                blocks.popitem(last=False)
        last_computed = max(len(units) - 1, 0) // size * size
        return min(hits * size, last_computed)
