"""A local tokenizer, to send prompts of exactly the requested token count.

Without one, prompts are sized in words (``scenario.prompts``: about one token each, and
the server's count differs by its tokenizer). With one (a ``tokenizer.json`` file or a
Hugging Face tokenizer folder holding one; loaded with the ``tokenizers`` package, never
downloaded) the text is built from its tokens so that it encodes to exactly N, and the
embedded simulator counts prompts with the same tokenizer. A folder with a chat template
(``common.chat_template``) also counts whole conversations as a chat server does.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import Any

from tpot_locust.common.chat_template import ChatTemplate, ChatTemplateError, load_chat_template

TOKENIZER_FILE = "tokenizer.json"
# Prompts are cut from one long text of random common words, a fresh stretch each time.
_POOL_WORDS = 4096
PIECE_TOKENS = 128  # a long text is built this many tokens at a time (~1 ms each here)


class TokenizerError(ValueError):
    """The tokenizer cannot be used (missing file, package or bad content)."""


class Tokenizer:
    """Counts tokens and builds texts of an exact token count."""

    def __init__(self, backend: Any, source: str) -> None:
        self._backend = backend
        self.source = source
        self._additive: bool | None = None  # do pieces' counts add up? (checked once)
        self._prefix_counts: dict[str, int] = {}
        self._overheads: dict[tuple[str, ...], int | None] = {}
        self._chat_template: ChatTemplate | None = None
        self._template_read = False  # the folder's chat template is read on first use

    def count(self, text: str) -> int:
        return len(self.ids(text))

    def ids(self, text: str) -> list[int]:
        """The text's token ids (no special tokens), as ``count`` counts them."""
        ids: list[int] = self._backend.encode(text, add_special_tokens=False).ids
        return ids

    def ids_unlocked(self, text: str) -> list[int]:
        """``ids`` that lets other threads run meanwhile (see ``count_unlocked``)."""
        ids: list[int] = self._backend.encode_batch([text], add_special_tokens=False)[0].ids
        return ids

    def count_unlocked(self, text: str) -> int:
        """``count`` that lets other threads run meanwhile, for a server's counting thread:
        the library's batch encode releases the GIL, its one-text encode does not (a 16k
        token prompt counted on another thread held the main one 50 ms)."""
        return len(self.ids_unlocked(text))

    def count_chat(self, messages: list[dict[str, str]]) -> int | None:
        """The prompt tokens a chat server counts for ``messages``: its chat template
        rendered with the generation prompt, then encoded without special tokens added
        (transformers' ``apply_chat_template(tokenize=True)``); None when the folder has no
        template (a bare ``tokenizer.json``)."""
        template = self.chat_template()
        if template is None:
            return None
        try:
            text = template.render(messages)
        except ChatTemplateError as error:
            raise TokenizerError(str(error)) from None
        return self.count(text)

    def template_tokens(self, roles: tuple[str, ...]) -> int | None:
        """The tokens a chat template adds around messages of these roles (its role
        headers, separators, the generation prompt): the template rendered around empty
        messages (nothing of theirs to merge with its text: exact for the tiny test model's
        byte-level BPE, ``tests/unit/test_chat_template.py``). Why not ``count_chat`` of
        the real history: that encodes the whole conversation again at every send (a
        16k-token history held the event loop ~60 ms); this is a short text, counted once
        per roles. None without a template."""
        if roles not in self._overheads:
            empty = [{"role": role, "content": ""} for role in roles]
            self._overheads[roles] = self.count_chat(empty)
        return self._overheads[roles]

    def chat_template(self) -> ChatTemplate | None:
        """The template beside ``tokenizer.json``, read once (``TokenizerError`` for one
        that cannot be used, every time it is asked for)."""
        if not self._template_read:
            try:
                self._chat_template = load_chat_template(Path(self.source).parent)
            except ChatTemplateError as error:
                raise TokenizerError(str(error)) from None
            self._template_read = True
        return self._chat_template

    def count_prefix(self, prefix: str) -> int:
        """``count`` of a class's shared prefix, which every session starts with."""
        if prefix not in self._prefix_counts:
            self._prefix_counts[prefix] = self.count(prefix)
        return self._prefix_counts[prefix]

    def text_of(
        self,
        tokens: int,
        rng: random.Random,
        words: tuple[str, ...],
        prefix: str = "",
        pause: Callable[[], None] | None = None,
    ) -> str:
        """``prefix`` and then text, together exactly ``tokens`` tokens more than the
        prefix alone (each message is counted on its own, no special tokens).

        Built in pieces of ``PIECE_TOKENS``, each exact on its own, with ``pause`` called
        between them: one 16k-token text encoded whole held the event loop ~60-140 ms, and
        every stream read in the process waited. Pieces that start at a word add up for
        the tokenizers that split at spaces first (byte-level BPE, Metaspace, WordPiece);
        for one that does not, the text is built whole, as one piece."""
        tokens = max(tokens, 1)
        if self._additive is None:
            self._additive = self._pieces_add_up(words)
        if not self._additive:
            return self._piece(tokens, rng, words, prefix)
        pieces = [prefix]
        for start in range(0, tokens, PIECE_TOKENS):
            pieces.append(self._piece(min(PIECE_TOKENS, tokens - start), rng, words))
            if pause is not None:
                pause()
        return "".join(pieces)

    def _pieces_add_up(self, words: tuple[str, ...]) -> bool:
        rng = random.Random(0)  # its own: the caller's sequence stays as it was
        pieces = [self._piece(PIECE_TOKENS, rng, words) for _ in range(3)]
        return self.count("".join(pieces)) == 3 * PIECE_TOKENS

    def _piece(
        self, tokens: int, rng: random.Random, words: tuple[str, ...], prefix: str = ""
    ) -> str:
        """Text (after ``prefix``) of exactly ``tokens`` tokens; it starts with a space."""
        target = (self.count_prefix(prefix) if prefix else 0) + tokens
        ids: list[int] = []
        while len(ids) < tokens + 8:  # some to spare: a cut may merge at the boundary
            text = " ".join(rng.choices(words, k=min(_POOL_WORDS, tokens + 16)))
            ids += self._backend.encode(" " + text, add_special_tokens=False).ids
        take = tokens
        for _ in range(64):  # converges in a step or two; bounded all the same
            decoded: str = self._backend.decode(ids[:take])
            text = prefix + decoded
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


MAX_TOKENIZER_BYTES = 256 * 1024 * 1024  # the largest tokenizer.json files are ~35 MB


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
    if not file.is_file():  # a device or FIFO is no tokenizer either
        raise TokenizerError(f"tokenizer {path}: no {TOKENIZER_FILE} there")
    if file.stat().st_size > MAX_TOKENIZER_BYTES:
        raise TokenizerError(
            f"tokenizer {file}: over {MAX_TOKENIZER_BYTES // 2**20} MiB, not a tokenizer.json"
        )
    try:
        return Tokenizer(Backend.from_file(str(file)), str(file))
    except Exception as error:  # noqa: BLE001 - the library raises its own exception types
        raise TokenizerError(f"tokenizer {file}: {error}") from None
