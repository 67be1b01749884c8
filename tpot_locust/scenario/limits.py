"""The ranges every number of a scenario must fall in (scenarios/README.md, "Limits").

A number past these is a mistake or an attack, never a test: NaN or infinity wedges the
event loop's timers, a 400-digit integer overflows where it meets an int64 or a float.
Refusing them on load, with the file and line, keeps them out of every later layer.
"""

from __future__ import annotations

from tpot_locust.common.distributions import MAX_VALUE

MAX_DURATION_S = 30 * 24 * 3600.0  # durations and times in a run: 30 days
MAX_TOKENS = MAX_VALUE  # 10,000,000: any token count (prompt, output, shared prefix)
MAX_USERS = 1_000_000  # users, and any other count (turns, in flight, a burst's requests)
MAX_NUMBER = 1_000_000.0  # rates per second, speed-ups, spawn rates, burstiness, timeouts (s)
MAX_SEED = 2**63 - 1  # seeds are int64
MAX_BURSTS = 100_000  # burst times the bursts entries may give in all (at, or every over the run)
# server.metrics_interval: seconds between samples of the server's /metrics (one sample's
# parse is ~11 ms of CPU in the sampler's own process; 20 a second is plenty)
DEFAULT_METRICS_INTERVAL_S = 0.25
MIN_METRICS_INTERVAL_S = 0.05
MAX_METRICS_INTERVAL_S = 60.0
# server.max_event_bytes: one SSE event or NDJSON line at most (the wire's default is
# 4 MiB; OpenAI's SDK accepts 64 MiB on purpose: a whole image or a long tool call)
MIN_EVENT_BYTES = 1024
MAX_EVENT_BYTES = 256 * 1024 * 1024  # = wire.sse.MAX_EVENT_BYTES_LIMIT (the parser's own check)
