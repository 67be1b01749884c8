"""A local tokenizer, to send prompts of exactly the requested token count.

Without one, prompts are sized in words (``scenario.prompts``: about one token each, and
the server's count differs by its tokenizer). With one (a ``tokenizer.json`` file or a
Hugging Face tokenizer folder holding one; loaded with the ``tokenizers`` package, never
downloaded) the text is built from its tokens so that it encodes to exactly N, and the
embedded simulator counts prompts with the same tokenizer.
"""

from __future__ import annotations

import random
from functools import lru_cache
from pathlib import Path
from typing import Any

TOKENIZER_FILE = "tokenizer.json"
# Prompts are cut from one long text of random common words, a fresh stretch each time.
_POOL_WORDS = 4096


class TokenizerError(ValueError):
    """The tokenizer cannot be used (missing file, package or bad content)."""


class Tokenizer:
    """Counts tokens and builds texts of an exact token count."""

    def __init__(self, backend: Any, source: str) -> None:
        self._backend = backend
        self.source = source

    def count(self, text: str) -> int:
        return len(self._backend.encode(text, add_special_tokens=False).ids)

    def text_of(
        self, tokens: int, rng: random.Random, words: tuple[str, ...], prefix: str = ""
    ) -> str:
        """``prefix`` and then text, together exactly ``tokens`` tokens more than the
        prefix alone (each message is counted on its own, no special tokens)."""
        tokens = max(tokens, 1)
        target = (self.count(prefix) if prefix else 0) + tokens
        ids: list[int] = []
        while len(ids) < tokens + 8:  # some to spare: a cut may merge at the boundary
            text = " ".join(rng.choices(words, k=min(_POOL_WORDS, tokens + 16)))
            ids += self._backend.encode(" " + text, add_special_tokens=False).ids
        take = tokens
        for _ in range(64):  # converges in a step or two; bounded all the same
            text = prefix + self._backend.decode(ids[:take])
            counted = self.count(text)
            if counted == target:
                return text
            take += 1 if counted < target else -1
            if not 0 < take <= len(ids):
                break
        raise TokenizerError(f"{self.source}: cannot build a text of {tokens} tokens")


def load_tokenizer(path: str | Path) -> Tokenizer:
    """The tokenizer at ``path`` (``tokenizer.json`` or a folder with one), loaded once
    per process."""
    return _load(str(Path(path).expanduser().resolve()))


@lru_cache(maxsize=4)
def _load(path: str) -> Tokenizer:
    try:
        from tokenizers import Tokenizer as Backend
    except ImportError:
        raise TokenizerError(
            f"tokenizer {path}: needs the tokenizers package (pip install tokenizers)"
        ) from None
    file = Path(path)
    if file.is_dir():
        file = file / TOKENIZER_FILE
    if not file.is_file():
        raise TokenizerError(f"tokenizer {path}: no {TOKENIZER_FILE} there")
    try:
        return Tokenizer(Backend.from_file(str(file)), str(file))
    except Exception as error:  # noqa: BLE001 - the library raises its own exception types
        raise TokenizerError(f"tokenizer {file}: {error}") from None
