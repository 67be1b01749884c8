"""What one streaming API decides, on both sides of the wire.

A ``Dialect`` is a small class per API (``apis/openai_chat.py`` is the worked example).
Client side: the request body, the framing, and ``read``: what one decoded event says
(``EventReading``); the stream decoder (``wire.stream_decoder``) applies the rules every
API shares (a token event's count, usage, finish, errors). Simulator side: ``sim_ask``
reads a request into the few numbers the simulator acts on, and the ``sim_*`` event
methods describe the stream it writes, as JSON objects with *slots* (``TEXT``,
``COMPLETION``, ``TOTAL``, ``SEQUENCE``) that the simulator splices per token
(``sim.chunks``), so a token costs one byte join whatever the API.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import ClassVar, Literal

from tpot_locust.common.errors import BAD_JSON, MODEL_LOOKUP, StreamError
from tpot_locust.common.timings import is_token_count

Framing = Literal["sse", "ndjson"]
CountText = Callable[[str], int]  # the simulator's prompt counter: words, or a tokenizer's
SimEvent = tuple[str | None, object]  # (SSE event name or None, a JSON object or raw bytes)

# Slots in the simulator's event templates: TEXT inside a JSON string (the token's escaped
# text), the others as whole JSON numbers (tokens so far; prompt + tokens so far; the
# event's index in the stream, counted from 0).
TEXT = "\x00t\x00"
COMPLETION = "\x00c\x00"
TOTAL = "\x00a\x00"
SEQUENCE = "\x00s\x00"

MAX_FINISH_REASON_CHARS = 64  # "stop", "length", "end_turn": anything longer is cut
MAX_MODEL_ID_CHARS = 1024


@dataclass(frozen=True)
class BodyOptions:
    """What the user class asks of every request, in no API's words."""

    model: str | None
    max_tokens: int
    ignore_eos: bool = True
    force_min_tokens: bool = True  # ask for exactly max_tokens where the API can
    include_usage: bool = True


def refuse_several_choices(class_name: str, extra_body: Mapping[str, object]) -> None:
    """``n`` other than 1 asks for several answers in one stream, whose events we would
    time as one answer's: refused, with the reason (``ValueError``)."""
    choices = extra_body.get("n", 1)
    if choices not in (None, 1) or isinstance(choices, bool):
        raise ValueError(
            f"{class_name}: extra_body n={choices!r}: n > 1 is not measured (each choice "
            "would need its own stream timing); remove n"
        )


@dataclass(slots=True)
class EventReading:
    """What one decoded event says; the decoder applies the shared rules to it."""

    tokens: bool = False  # carries at least one generated token
    text: str = ""  # its answer text (the conversation's next turn is built from it)
    reasoning: bool = False  # its tokens are reasoning, not answer
    count: int | None = None  # tokens it carries, when the event itself says (token ids)
    count_source: str | None = None  # where ``count`` came from: token_ids, logprobs, token
    completion: int | None = None  # completion tokens so far, as the server counts them
    prompt: int | None = None  # prompt tokens, as the server counts them
    cached: int | None = None  # prompt tokens served from the prefix cache
    reasoning_reported: int | None = None  # reasoning tokens, as the server counts them
    finish_reason: str | None = None  # the server's words for why the stream ended
    done: bool = False  # the stream's last event: later ones are ignored
    error: str | None = None  # the server's message: the request failed


@dataclass(frozen=True)
class SimAsk:
    """A request as the simulator acts on it."""

    prompt_tokens: int
    max_tokens: int
    min_tokens: int = 0
    ignore_eos: bool = False
    stream: bool = True
    include_usage: bool = False
    continuous_usage: bool = False
    model: str | None = None  # the model asked for; None: the API names none


@dataclass(frozen=True)
class SimContext:
    """One simulated response, as its events are rendered."""

    response_id: str
    model: str
    created: int
    ask: SimAsk
    completion_tokens: int  # decided before the first token
    finish_reason: str  # "length" or "stop": the dialect says it in its own words
    answer_text: Callable[[], str] | None = None  # the whole answer's text, when asked
    cached_tokens: int | None = None  # prompt tokens from the prefix cache; None: no cache
    # the first ``reasoning_tokens`` of ``completion_tokens`` are reasoning (thinking),
    # always followed by at least one answer token; ``reasoning_text`` is their text
    reasoning_tokens: int = 0
    reasoning_text: Callable[[], str] | None = None


class BadAsk(ValueError):
    """A request the simulator answers with an HTTP error (400 unless ``status``)."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


@dataclass(frozen=True)
class FastPath:
    """Byte marks of a plain token event (text, nothing else), for the decoder's scan:
    ``text_marker`` opens its text; ``plain_mark`` is in every plain event; ``not_plain``
    finds anything that needs a full decode (usage, errors, tool calls, reasoning...)."""

    text_marker: bytes
    plain_mark: bytes
    not_plain: re.Pattern[bytes]


class Dialect:
    """One API; subclasses set the class attributes and override what differs."""

    name: ClassVar[str]
    path: ClassVar[str]
    framing: ClassVar[Framing] = "sse"
    media_types: ClassVar[tuple[str, ...]] = ("text/event-stream",)
    done_marker: ClassVar[bytes | None] = None  # a data payload that ends the stream
    models_path: ClassVar[str | None] = "/v1/models"  # None: the body names no model
    fast: ClassVar[FastPath | None] = None
    sim_id_prefix: ClassVar[str] = ""
    serves_whole: ClassVar[bool] = False  # the simulator also answers stream=false
    # the server renders the messages with the model's chat template (its prompt count
    # includes the template's tokens: ``ChatUser.served_prompt_tokens``)
    templated: ClassVar[bool] = False
    # the simulator can stream reasoning tokens in this API (``sim_reasoning_token``)
    sim_reasoning: ClassVar[bool] = False
    # reasoning inline in the text (``think_tags``): the first reasoning token's text starts
    # with the first, the first answer token's with the second; None: a channel of its own
    sim_think_tags: ClassVar[tuple[str, str] | None] = None

    # -- client side -------------------------------------------------------------------------

    def body(self, history: list[dict[str, str]], options: BodyOptions) -> dict[str, object]:
        raise NotImplementedError

    def headers(self, api_key: str | None) -> dict[str, str]:
        """The API's own request headers (its credentials, a version header)."""
        return {"Authorization": f"Bearer {api_key}"} if api_key else {}

    def first_model(self, body: bytes) -> str:
        """The first model of the models list (OpenAI's shape: ``data[0].id``)."""
        try:
            model = json.loads(body)["data"][0]["id"]
        except (ValueError, KeyError, IndexError, TypeError, RecursionError):
            model = None
        return checked_model(model, body, self.models_path)

    def for_stream(self) -> Dialect:
        """The reader of one stream: the dialect itself, or a fresh object where ``read``
        needs to remember earlier events (SGLang's text comes whole, not as deltas)."""
        return self

    def read(self, event: dict[str, object], name: str | None) -> EventReading:
        """What one event (a JSON object; ``name``: its SSE event name) says."""
        raise NotImplementedError

    # -- simulator side ----------------------------------------------------------------------

    def sim_ask(self, data: dict[str, object], count: CountText, default_max_tokens: int) -> SimAsk:
        """The request's numbers; raises ``BadAsk`` for one the server would refuse."""
        raise NotImplementedError

    def sim_opening(self, context: SimContext) -> list[SimEvent]:
        """Events before the first token (a role chunk, ``message_start``...)."""
        return []

    def sim_token(self, context: SimContext) -> SimEvent:
        """The token event, with slots."""
        raise NotImplementedError

    def sim_reasoning_token(self, context: SimContext) -> SimEvent:
        """A reasoning token's event, with slots (only where ``sim_reasoning``); the events
        before the first (``sim_opening``) may differ when ``context.reasoning_tokens``."""
        raise NotImplementedError

    def sim_reasoning_end(self, context: SimContext) -> list[SimEvent]:
        """Events between the last reasoning token and the first answer token (a reasoning
        block closed, the answer's opened), without slots; their count shifts the later
        events' ``SEQUENCE``."""
        return []

    def sim_last_token(self, context: SimContext) -> SimEvent | None:
        """The last token's event when it differs from the others (TGI's carries the
        details), with slots; None: the usual one."""
        return None

    def sim_closing(self, context: SimContext) -> list[SimEvent]:
        """Events after the last token (finish, usage, the end marker)."""
        return []

    def sim_whole(self, context: SimContext, text: str) -> dict[str, object] | None:
        """The body of a non-streaming answer; None: this API is only served streaming."""
        return None

    def sim_models(
        self, model: str, created: int, adapters: tuple[str, ...] = ()
    ) -> dict[str, object]:
        """The models list the simulator serves at ``models_path``: the base model first,
        then its LoRA adapters (vLLM lists each with the base as ``parent``)."""
        cards = [
            {
                "id": name,
                "object": "model",
                "created": created,
                "owned_by": "tpot-sim",
                "root": name,
                "parent": None if name == model else model,
            }
            for name in (model, *adapters)
        ]
        return {"object": "list", "data": cards}


def checked_model(model: object, body: bytes, where: str | None) -> str:
    """``model`` when it is a believable model id, else ``StreamError`` (model_lookup)."""
    if not isinstance(model, str) or not model or len(model) > MAX_MODEL_ID_CHARS:
        raise StreamError(MODEL_LOOKUP, f"GET {where} gave no model: {body[:200]!r}")
    return model


def token_count(container: object, key: str, where: str = "usage") -> int | None:
    """``container[key]`` as a token count; None when absent (or ``container`` is None);
    ``where`` names the container in messages.

    Raises ``StreamError`` (``bad_json``) for any other value: a negative, fractional,
    boolean or text count, or one beyond ``MAX_TOKEN_COUNT`` (a 400-digit count once
    reached numpy at the run's end and lost every result), so the request that carried it
    fails, with the reason, and nothing else does."""
    if container is None:
        return None
    if not isinstance(container, dict):
        raise StreamError(BAD_JSON, f"{where} is {described(container)}, not an object")
    value = container.get(key)
    if value is None:
        return None
    if not is_token_count(value):
        raise StreamError(BAD_JSON, f"{where}.{key} is not a token count: {described(value)}")
    return value


def nested(container: object, *keys: str) -> object:
    """``container[k1][k2]...`` or None where any level is missing or not an object."""
    for key in keys:
        if not isinstance(container, dict):
            return None
        container = container.get(key)
    return container


def details(usage: object, key: str) -> dict[str, object] | None:
    """A usage details object (``prompt_tokens_details``...), or None: servers send null
    or leave it out, and neither is an error."""
    found = usage.get(key) if isinstance(usage, dict) else None
    return found if isinstance(found, dict) else None


def list_length(value: object) -> int | None:
    """The length of a non-empty list (token ids, logprob entries), else None."""
    return len(value) if isinstance(value, list) and value else None


def finish_words(value: object) -> str | None:
    """A finish reason as text, cut short; None for none."""
    if value is None or value == "":
        return None
    return str(value)[:MAX_FINISH_REASON_CHARS]


def text_of(value: object) -> str:
    return value if isinstance(value, str) else ""


def described(value: object) -> str:
    """A short description of a JSON value for a message (never the whole of a huge one)."""
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, int):
        if abs(value) <= 10**12:
            return str(value)
        digits = int(abs(value).bit_length() * 0.30103) + 1
        return f"{'a negative' if value < 0 else 'an'} integer of about {digits} digits"
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, str):
        return f"the text {value[:40]!r}"
    return f"a JSON {'array' if isinstance(value, list) else 'object'}"


def int_field(data: Mapping[str, object], key: str, default: int, minimum: int) -> int:
    """An integer field of a request (simulator side), checked as vLLM checks it."""
    value = data.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadAsk(f"'{key}' must be an integer")
    if value < minimum:
        raise BadAsk(f"'{key}' must be at least {minimum}, got {value}")
    if value > MAX_INT_FIELD:
        raise BadAsk(f"'{key}' must be at most {MAX_INT_FIELD}")
    return value


def bool_field(data: Mapping[str, object], key: str) -> bool:
    value = data.get(key)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise BadAsk(f"'{key}' must be a boolean")
    return value


def object_field(data: Mapping[str, object], key: str) -> dict[str, object]:
    value = data.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise BadAsk(f"'{key}' must be an object")
    return value


MAX_INT_FIELD = 10**9  # max_tokens and the like: more is no request, only a hang
