"""The fixed token vocabulary: words with a leading space, JSON-escaped once at import."""

from __future__ import annotations

import json

WORDS: tuple[str, ...] = tuple(
    " " + w
    for w in (
        "the quick brown fox jumps over lazy dog and then runs far away into a deep green "
        "forest where tall trees sway while birds sing softly under bright morning light "
        "every small creature finds its own quiet place to rest until evening comes again"
    ).split()
)

# JSON string contents (no quotes), UTF-8 encoded: what gets spliced into pre-encoded chunks.
ESCAPED: tuple[bytes, ...] = tuple(
    json.dumps(w, ensure_ascii=False)[1:-1].encode("utf-8") for w in WORDS
)


def word(index: int) -> str:
    """Token ``index`` (0-based) of every response; deterministic so tests can check text."""
    return WORDS[index % len(WORDS)]


def escaped(index: int) -> bytes:
    return ESCAPED[index % len(ESCAPED)]


def text(count: int, start: int = 0) -> str:
    """The text of tokens ``start`` to ``count`` (0-based, ``count`` excluded): a whole
    completion of ``count`` tokens, or its answer after ``start`` reasoning tokens."""
    return "".join(word(i) for i in range(start, count))
