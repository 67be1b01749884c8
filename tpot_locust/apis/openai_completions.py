"""OpenAI's legacy Completions API (``/v1/completions``): one prompt text, text in
``choices[0].text``; otherwise the Chat Completions stream (``openai_chat``)."""

from __future__ import annotations

import re
from typing import ClassVar

from tpot_locust.apis.dialect import CountText, EventReading, FastPath, list_length, nested, text_of
from tpot_locust.apis.openai_chat import OpenAIStream
from tpot_locust.apis.prompt_counts import count_completion_prompt

_NOT_PLAIN = re.compile(rb'"(?:usage|error|token_ids|logprobs)":(?!null)')


class Completions(OpenAIStream):
    name: ClassVar[str] = "completions"
    path: ClassVar[str] = "/v1/completions"
    fast: ClassVar[FastPath | None] = FastPath(b'"text":"', b'"finish_reason":null', _NOT_PLAIN)
    sim_id_prefix: ClassVar[str] = "cmpl-"
    chunk_object: ClassVar[str] = "text_completion"
    whole_object: ClassVar[str] = "text_completion"

    def prompt_fields(self, history: list[dict[str, str]]) -> dict[str, object]:
        return {"prompt": "\n\n".join(message["content"] for message in history)}

    def read_choice(self, choice: dict[str, object], reading: EventReading) -> None:
        text = choice.get("text")
        reading.tokens = bool(text)
        reading.text = text_of(text)

    def logprob_entries(self, choice: dict[str, object]) -> int | None:
        return list_length(nested(choice, "logprobs", "tokens"))

    def sim_prompt(self, data: dict[str, object], count: CountText) -> int:
        return count_completion_prompt(data.get("prompt"), count)

    def text_choice(self, text: str | None) -> dict[str, object]:
        return {"text": text if text is not None else ""}

    def whole_choice(self, text: str) -> dict[str, object]:
        return {"text": text}


DIALECT = Completions()
