"""Synthetic prompt text of about a requested number of tokens.

Words are common English words that are a single token (with their leading space) in the
BPE vocabularies of Llama, Qwen, Mistral and GPT models, so N words is about N tokens; the
server's ``usage.prompt_tokens`` gives the real count, and both are kept. Random words
also keep prompts from sharing a prefix, so prefix caching does not hide prefill work.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from functools import lru_cache
from typing import Protocol

WORDS: tuple[str, ...] = tuple(
    """the of and to in is was for that with as on by at from his her they this had
    are but not be or have an which one were all their been has would when there who more
    will out up into so can said what about other some time them these two may first then
    do any like my now over such our man me even most made after also did many before must
    through back years where much your way well down should because each just those people
    how too little state good very make world still own see men work long get here between
    both life being under never day same another know while last might us great old year
    off come since against go came right used take three states himself few house use during
    without again place around however home small found thought went say part once general
    high upon school every don does got united left number course war until always away
    something fact though water less public put think almost hand enough far took head yet
    government system better set told nothing night end why called didn find going look
    asked later knew point next program city business give group toward young days let room
    president side social given present several order national possible rather second face
    per among form important often things looked early white case john become large big need
    four within felt along children saw best church ever least power development light""".split()
)


# Words built between two calls of ``pause``: ~0.3 ms of work (16k words took ~2.4 ms).
PIECE_WORDS = 2048


def synthetic_text(tokens: int, rng: random.Random, pause: Callable[[], None] | None = None) -> str:
    """About ``tokens`` tokens of text; no two calls share a prefix (with high probability).

    ``pause`` is called between pieces of a long text, so that a caller on the event loop
    that reads streams can let them be read meanwhile."""
    count = max(tokens, 1)
    if pause is None or count <= PIECE_WORDS:
        return " ".join(rng.choices(WORDS, k=count))
    pieces = []
    for start in range(0, count, PIECE_WORDS):
        pieces.append(" ".join(rng.choices(WORDS, k=min(PIECE_WORDS, count - start))))
        pause()
    return " ".join(pieces)


BLOCKS_CACHED = 4096  # prefix blocks kept built (~3 KB each at 512 words)


class _Exact(Protocol):
    """A tokenizer (``common.tokens.Tokenizer``): text of exactly N tokens."""

    def text_of(self, tokens: int, rng: random.Random, words: tuple[str, ...]) -> str: ...

    def __hash__(self) -> int: ...


def blocks_text(
    blocks: tuple[int, ...], block_tokens: int, tokens: int, exact: _Exact | None = None
) -> str:
    """A published trace's prompt from its prefix blocks (``trace_formats``): each block's
    text depends on its id alone, so requests (of any process) that share leading block
    ids share exactly that much leading text, as a prefix cache saw them; the last block
    is cut to what is left of ``tokens``. Words (about a token each); with ``exact`` (a
    tokenizer) each block is exactly its tokens on its own."""
    last = max(1, tokens - (len(blocks) - 1) * block_tokens)
    sizes = [block_tokens] * (len(blocks) - 1) + [min(last, block_tokens)]
    if exact is None:
        return " ".join(
            " ".join(_block_words(block, block_tokens)[:size])
            for block, size in zip(blocks, sizes, strict=True)
        )
    pairs = zip(blocks, sizes, strict=True)  # each exact block starts with its own space
    return "".join(_exact_block(exact, block, size) for block, size in pairs)


@lru_cache(maxsize=BLOCKS_CACHED)
def _block_words(block: int, block_tokens: int) -> tuple[str, ...]:
    rng = random.Random(f"tpot-block-{block}-{block_tokens}")  # the same in every process
    return tuple(rng.choices(WORDS, k=block_tokens))


@lru_cache(maxsize=BLOCKS_CACHED)
def _exact_block(exact: _Exact, block: int, size: int) -> str:
    return exact.text_of(size, random.Random(f"tpot-block-{block}"), WORDS)
