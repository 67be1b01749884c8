"""A small byte-level BPE tokenizer built in a test (no download): exact-length prompts."""

from __future__ import annotations

from pathlib import Path

from tpot_locust.scenario.prompts import WORDS


def build_tokenizer(folder: Path, vocab_size: int = 600) -> Path:
    """``folder/tokenizer.json``, trained on our own prompt words (and some punctuation) so
    that its merges split them the way a real model's vocabulary splits unseen text."""
    from tokenizers import ByteLevelBPETokenizer

    text = [" ".join(WORDS[i:] + WORDS[:i]) for i in range(0, len(WORDS), 7)]
    text.append("Hello, world! Load testing: tokens per second; 0123456789.")
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(text, vocab_size=vocab_size, min_frequency=2, show_progress=False)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "tokenizer.json"
    bpe.save(str(path))
    return path
