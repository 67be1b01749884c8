"""Categorised request failures.

Every way a request can fail maps to one category name; the category is what
``summary.json`` counts under ``requests.errors`` and what Locust's failure table shows
first, so a tail caused by failures is visible rather than silently dropped.
"""

from __future__ import annotations

HTTP_4XX = "http_4xx"
HTTP_429 = "http_429"
HTTP_5XX = "http_5xx"
STREAM_ERROR_EVENT = "stream_error_event"
CONNECTION_ERROR = "connection_error"
CONNECTION_RESET = "connection_reset"
TRUNCATED = "truncated"
# An event that is not JSON, or JSON the protocol cannot mean: a usage count that is no
# token count (negative, fractional, text, beyond ``timings.MAX_TOKEN_COUNT``).
BAD_JSON = "bad_json"
BAD_HTTP = "bad_http"  # not HTTP: a bad status line, head, Content-Length or chunk framing
# A reply that is no event stream: another content type, a body compressed in an encoding
# we do not decode (br, zstd: gzip and deflate are decoded), a redirect
# (not followed), an HTML page served as text/event-stream.
NOT_SSE = "not_sse"
TIMEOUT_CONNECT = "timeout_connect"
TIMEOUT_FIRST_TOKEN = "timeout_first_token"
TIMEOUT_IDLE = "timeout_idle"
TIMEOUT_TOTAL = "timeout_total"
OVERSIZED_EVENT = "oversized_event"
EMPTY_STREAM = "empty_stream"
CLIENT_ERROR = "client_error"  # a bug on our side, still counted, never raised
MODEL_LOOKUP = "model_lookup"  # GET /v1/models gave no model (set `model` to skip it)
# Cut off on our side by the end of the run (Locust stops users mid-request): counted
# apart from failures, like k6's interrupted iterations, and never a failed SLO.
INTERRUPTED = "interrupted"


class StreamError(Exception):
    """A request that failed, with the category it is counted under."""

    def __init__(self, category: str, message: str) -> None:
        super().__init__(f"{category}: {message}")
        self.category = category
        self.message = message


def http_status_category(status: int) -> str:
    if status == 429:
        return HTTP_429
    if 400 <= status < 500:
        return HTTP_4XX
    return HTTP_5XX
