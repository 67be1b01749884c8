"""The wire: one HTTP/1.1 connection, chunked bodies, the SSE and NDJSON parsers, the
stream decoder's shared rules (each API's own reading is its dialect's, ``apis``), and
``streaming.stream_request`` (one streamed request, stamped as it arrives). Knows bytes,
stamps and failure categories; imports only ``apis`` and ``common`` (never the metrics,
never Locust)."""
