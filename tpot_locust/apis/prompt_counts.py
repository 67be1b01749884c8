"""How the simulator counts a request's prompt, whatever the API calls it.

Without a tokenizer a prompt is counted in whitespace-separated words; with one, in its
tokens, each message on its own (``CountText``).
"""

from __future__ import annotations

from tpot_locust.apis.dialect import BadAsk, CountText

# Python's ASCII whitespace, as ``str.split()`` splits on it.
_ASCII_SPACE = bytes(range(9, 14)) + bytes(range(28, 33))
_LONG_TEXT = 4096
_OTHER_SPACES = tuple(chr(code) for code in _ASCII_SPACE if code != 32)
_SPACE_TO_0 = bytes(0 if i in _ASCII_SPACE else 1 for i in range(256))


def count_words(value: object) -> int:
    """``len(value.split())``; without the list of words for long ASCII text, whose
    building (2.3 ms for a 16k-word prompt) held the server's loop and every stream's
    next token: a burst of long prompts then slowed the gap-mode streams it must not."""
    if not isinstance(value, str):
        return 0
    if len(value) < _LONG_TEXT or not value.isascii():
        return len(value.split())
    if "  " not in value and not any(space in value for space in _OTHER_SPACES):
        return value.count(" ") + 1 - value.startswith(" ") - value.endswith(" ")
    marks = value.encode("ascii").translate(_SPACE_TO_0)  # 0 for a space, 1 for the rest
    # a word starts at a non-space that follows a space, or at the text's start
    return marks.count(b"\x00\x01") + (marks[:1] == b"\x01")


def _content_words(content: object, count: CountText) -> int:
    if isinstance(content, list):  # multi-part content: count the text parts
        return sum(_text_tokens(p.get("text"), count) for p in content if isinstance(p, dict))
    return _text_tokens(content, count)


def _text_tokens(value: object, count: CountText) -> int:
    return count(value) if isinstance(value, str) else 0


def count_chat_prompt(
    messages: object, count: CountText = count_words, key: str = "messages"
) -> int:
    """Prompt tokens of a list of messages = the words (or tokens by ``count``) of every
    message's content (a string, or parts whose ``text`` is counted)."""
    if not isinstance(messages, list) or not messages:
        raise BadAsk(f"'{key}' must be a non-empty list")
    total = 0
    for message in messages:
        if not isinstance(message, dict):
            raise BadAsk("each message must be an object")
        total += _content_words(message.get("content"), count)
    return total


def count_completion_prompt(
    prompt: object, count: CountText = count_words, key: str = "prompt"
) -> int:
    """Words (or tokens by ``count``) of a prompt string; token-id lists count one per id."""
    if isinstance(prompt, str):
        return count(prompt)
    if isinstance(prompt, list) and prompt:
        if all(isinstance(p, str) for p in prompt):
            return sum(count(p) for p in prompt)
        if all(isinstance(p, int) and not isinstance(p, bool) for p in prompt):
            return len(prompt)
        if all(isinstance(p, list) for p in prompt):
            return sum(len(p) for p in prompt)
    raise BadAsk(f"'{key}' must be a string, a list of strings or a list of token ids")
