"""The model a user class sends to when none is named: the first of the server's models
list (GET /v1/models, Ollama's /api/tags), asked once per server and API path.

Bounded in time and size: a server answering a byte a second once held every user in its
lookup for the whole run, which then measured nothing.
"""

from __future__ import annotations

from tpot_locust.apis import dialect_named
from tpot_locust.apis.dialect import Dialect
from tpot_locust.common.errors import MODEL_LOOKUP, StreamError, http_status_category
from tpot_locust.wire.deadline import Deadline
from tpot_locust.wire.http_client import HTTPConnection, ReadTimeout
from tpot_locust.wire.stream_decoder import decode_error_body
from tpot_locust.wire.streaming import MAX_ERROR_BODY

MODEL_LOOKUP_TIMEOUT_S = 30.0  # GET /v1/models in all, at most (else the first-token timeout)
MAX_MODELS_BODY = 1024 * 1024  # a models list larger than this is no models list


def lookup_timeout(first_token_timeout: float) -> float:
    """The lookup's total limit: the first-token timeout, at most 30 s."""
    first = first_token_timeout
    return first if 0 < first < MODEL_LOOKUP_TIMEOUT_S else MODEL_LOOKUP_TIMEOUT_S


def first_listed_model(
    connection: HTTPConnection, dialect: Dialect, headers: dict[str, str], timeout: float
) -> str:
    """The first model of the API's models list, read within ``timeout`` in all and
    ``MAX_MODELS_BODY``; raises ``StreamError``."""
    deadline = Deadline(timeout, timeout, timeout)
    path = dialect.models_path or "/v1/models"
    try:
        response, _ = connection.request("GET", path, headers, deadline=deadline)
        body = response.read(limit=MAX_MODELS_BODY + 1)
    except ReadTimeout:
        connection.close()
        raise StreamError(
            MODEL_LOOKUP, f"GET {path}: no complete answer within {timeout:g} s"
        ) from None
    if response.status >= 400:
        raise StreamError(
            http_status_category(response.status),
            f"GET {path}: HTTP {response.status}: {decode_error_body(body[:MAX_ERROR_BODY])}",
        )
    if len(body) > MAX_MODELS_BODY:
        raise StreamError(MODEL_LOOKUP, f"GET {path}: answer larger than {MAX_MODELS_BODY} bytes")
    return dialect.first_model(body)


def first_model_id(body: bytes) -> str:
    """The first model id of a GET /v1/models answer; raises ``StreamError``
    (``model_lookup``) when it holds none (or no believable one)."""
    return dialect_named("chat").first_model(body)
