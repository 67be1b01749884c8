"""Reasoning streamed inline with the answer, between ``<think>`` and ``</think>``: how the
native generate APIs (SGLang's, TGI's) send a reasoning model's thinking, which their
OpenAI-compatible routes split into ``reasoning_content`` instead."""

from __future__ import annotations

THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"


class InlineThinking:
    """Per stream: whether the text so far is inside ``<think>...</think>``, for APIs that
    stream a reasoning model's thinking inline with the answer (SGLang's and TGI's native
    generate APIs). A tag split across events is not recognised: tokenizers of reasoning
    models hold each tag as one token."""

    __slots__ = ("inside",)

    def __init__(self) -> None:
        self.inside = False

    def split(self, text: str) -> tuple[bool, str]:
        """(whether the event is reasoning, its answer text): an event that holds no answer
        text and touches thinking (inside it, or a tag) is reasoning."""
        if not self.inside and THINK_OPEN not in text:
            return False, text  # nearly every event: no tag, outside thinking
        touched = self.inside
        answer: list[str] = []
        while text:
            if self.inside:
                at = text.find(THINK_CLOSE)
                if at < 0:
                    break
                text, self.inside = text[at + len(THINK_CLOSE) :], False
                continue
            at = text.find(THINK_OPEN)
            if at < 0:
                answer.append(text)
                break
            answer.append(text[:at])
            text, self.inside = text[at + len(THINK_OPEN) :], True
            touched = True
        answer_text = "".join(answer)
        return touched and not answer_text, answer_text
