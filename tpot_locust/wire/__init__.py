"""The wire: one HTTP/1.1 connection, chunked bodies, the SSE parser, OpenAI stream
decoding, and ``streaming.stream_request`` (one streamed request, stamped as it arrives).
Knows bytes, stamps and failure categories; imports only ``common`` (never the metrics,
never Locust)."""
