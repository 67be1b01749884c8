"""Per-request token timings and the samples each metric takes from them.

Every time is on the stamp clock of the process that sent the request (``common.clock``:
wall-clock ns that no step of the wall clock moves; docs/metrics.md, "Metric
definitions"). This object is what the ``token_timings`` event carries, so a locustfile's
own listener sees exactly what our recorder sees.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, TypeGuard

import numpy as np

from tpot_locust.common.clock import SEGMENT_CLOCK
from tpot_locust.common.errors import CLIENT_ERROR

if TYPE_CHECKING:
    import numpy.typing as npt

NS_PER_US = 1000
# More tokens than this in one request is no model's answer but a lying or broken server:
# such a count is refused where it is read (a 400-digit one reached numpy at the run's end
# and lost every result). Far below int64, so sums of many requests stay exact.
MAX_TOKEN_COUNT = 10**9
INT64_MAX = 2**63 - 1
# Where a request's per-event token counts k_i came from (``RequestTimings.count_source``):
# the server's per-chunk usage growth, a per-event list of token ids, per-event logprob
# entries, one token object per event (TGI), or one token per event (an estimate).
COUNT_SOURCES = ("usage", "token_ids", "logprobs", "token", "events")
ESTIMATED_COUNT_SOURCE = "events"
_TIMES = ("t_intended_ns", "t_send_ns", "t_end_ns")  # a request's own times (int64 each)


def is_token_count(value: object) -> TypeGuard[int]:
    """Whether ``value`` can be a request's token count: an int (not a bool) in
    0..``MAX_TOKEN_COUNT``."""
    return type(value) is int and 0 <= value <= MAX_TOKEN_COUNT  # type(): bool is no count


def _is_int64(value: object) -> bool:
    return type(value) is int and -INT64_MAX <= value <= INT64_MAX


def int_array() -> array[int]:
    """A growable int64 sequence for per-event values.

    Why not a list: Python's cycle collector visits every element of every list it finds in
    a young generation, and a worker holds a second's finished requests (hundreds of
    lists of hundreds of stamps) until its report: single collections paused the event
    loop for 2-8 ms (measured in a Locust worker at 32k tokens/s). An array holds plain
    numbers the collector never looks at, and numpy reads it without conversion.
    """
    return array("q")


# A body may go on this long after its stream's final event ([DONE]): its last chunk and
# trailers; a server that never ends it (an endless chunk) holds its user no longer.
BODY_END_GRACE_S = 1.0
# Answer text kept for a conversation's next turn (~250k tokens): a server that ignores
# max_tokens holds no user's memory past it (wire.stream_decoder).
MAX_KEPT_TEXT = 1 << 20


@dataclass(slots=True)
class RequestTimings:
    """One request as the client saw it: what ``token_timings`` listeners receive.

    Every time is on the stamp clock of the process that sent the request
    (``common.clock.stamp_ns()``; token stamps: the kernel's receive stamp converted to that
    clock where available; see docs/metrics.md, "Metric definitions"). Fields:

    - ``user_class``, ``api`` (one of ``tpot_locust.apis.API_NAMES``: ``chat``,
      ``completions``, ...), ``request_id`` (also sent as ``X-Request-Id``; starts with the
      sending process's tag);
    - ``t_intended_ns``: when the load model meant to send it (open loop; else = the send);
      ``scheduled``: True when that was an open-loop arrival time;
    - ``t_send_ns``: when the request left (docs/metrics.md: its first segment's departure
      on the segment clock, else just before it was written); ``t_end_ns``: when the stream
      ended, successfully or not;
    - ``token_stamps``: arrival of each token event; ``token_counts``: the tokens it carried
      (k_i); both int64 arrays; ``count_source``: where every k_i came from, one of
      ``COUNT_SOURCES`` (``events``: none said, 1 each, an estimate);
      ``counts_from_usage``: k_i came from the server (any source but ``events``), so
      they may differ from 1;
    - ``output_tokens``: n (the server's ``usage.completion_tokens``, else the sum of k_i,
      then ``tokens_estimated``);
    - ``answer_stamp_ns``: arrival of the first event carrying answer (not reasoning)
      tokens, None when none did; ``reasoning_tokens``: tokens of reasoning events, or the
      server's own reasoning count where it reports one (part of ``output_tokens``);
    - ``cached_prompt_tokens``: prompt tokens the server served from its prefix cache
      (``usage.prompt_tokens_details.cached_tokens`` or its equivalent), None when it did
      not say;
    - ``prompt_tokens_requested`` (our estimate) and ``prompt_tokens_reported`` (the
      server's ``usage.prompt_tokens``, or None); ``finish_reason`` as the server sent it;
    - ``error_category``: None for success, else a category of ``tpot_locust.common.errors``
      (``interrupted`` for a request the stop cut off); ``error_message``: the detail;
    - ``read_delays_ns``: per socket read, our clock at the read minus the arrival of its
      oldest data (the segment clock) or of its newest (the kernel clock; a lower bound);
      none on the user clock;
    - ``retransmits``: TCP segments retransmitted on the request's connection between its
      send and its end, ours and the server's (``wire.tcp_info``; 0 where it cannot say).
    """

    user_class: str
    api: str
    request_id: str
    t_intended_ns: int
    t_send_ns: int
    token_stamps: array[int] = field(default_factory=int_array)  # arrival of each token event
    token_counts: array[int] = field(default_factory=int_array)  # k_i tokens of event i
    output_tokens: int = 0
    tokens_estimated: bool = False
    counts_from_usage: bool = False
    prompt_tokens_requested: int = 0
    prompt_tokens_reported: int | None = None
    finish_reason: str | None = None
    error_category: str | None = None
    error_message: str | None = None
    t_end_ns: int = 0  # when the stream ended (success or failure)
    scheduled: bool = False  # open loop: t_intended_ns is an arrival time, not the send
    # Per read (kernel stamps only): our clock at the read - the kernel's arrival stamp.
    read_delays_ns: array[int] = field(default_factory=int_array)
    retransmits: int = 0  # TCP retransmissions between the send and the end (TCP_INFO)
    # The clock its token events were stamped on (``common.clock``): ``segment`` when every
    # read was cut into its segments' own kernel stamps, so no read shared a stamp however
    # late it came; "" for timings made elsewhere (a locustfile's own).
    arrival_clock: str = ""
    departed: bool = False  # t_send_ns is its first segment's departure, seen by the tap
    read_in_batches: bool = False  # its body read in batches after its first read (loop_reads)
    # its body went on past its final event ([DONE]): complete, its connection closed
    # ``BODY_END_GRACE_S`` after that event at most
    body_after_end: bool = False
    max_tokens: int | None = None  # the output tokens it asked for, where ours (``max_tokens``)
    count_source: str = ESTIMATED_COUNT_SOURCE  # where k_i came from (COUNT_SOURCES)
    answer_stamp_ns: int | None = None  # arrival of the first answer (not reasoning) event
    reasoning_tokens: int = 0  # of output_tokens: those of reasoning events
    cached_prompt_tokens: int | None = None  # the server's prefix-cache hit, if it said
    # the model its class chose for it (``classes.<name>.model``); None: the class named none
    model: str | None = None

    @property
    def stamps_recovered(self) -> bool:
        """No token's stamp depended on when it was read."""
        return self.arrival_clock == SEGMENT_CLOCK

    @property
    def ok(self) -> bool:
        return self.error_category is None

    @property
    def ttft_ns(self) -> int | None:
        return self.token_stamps[0] - self.t_send_ns if self.token_stamps else None

    @property
    def ttft_from_intended_ns(self) -> int | None:
        return self.token_stamps[0] - self.t_intended_ns if self.token_stamps else None

    @property
    def ttfat_ns(self) -> int | None:
        """Send to the first answer token event (TTFAT): after any reasoning, when a reader
        sees the answer begin. Without reasoning every event is answer, so it is TTFT; None
        when no event carried answer."""
        if self.answer_stamp_ns is not None:
            return self.answer_stamp_ns - self.t_send_ns
        return self.ttft_ns if self.reasoning_tokens == 0 else None

    @property
    def e2e_ns(self) -> int:
        last = self.token_stamps[-1] if self.token_stamps else self.t_end_ns
        return last - self.t_send_ns

    @property
    def decode_tokens(self) -> int:
        """Output tokens after the first event's: the denominator of request TPOT."""
        if not self.token_counts:
            return 0
        return self.output_tokens - self.token_counts[0]

    @property
    def request_tpot_ns(self) -> float | None:
        if len(self.token_stamps) < 2 or self.decode_tokens < 1:
            return None
        return (self.token_stamps[-1] - self.token_stamps[0]) / self.decode_tokens

    def out_of_range(self) -> str | None:
        """Which number no request can have (a count beyond ``MAX_TOKEN_COUNT``, negative,
        not an int, a time beyond int64), or None: what must never reach an int64 array."""
        for name in ("output_tokens", "prompt_tokens_requested", "reasoning_tokens"):
            if not is_token_count(getattr(self, name)):
                return name
        for name in ("prompt_tokens_reported", "cached_prompt_tokens"):
            value = getattr(self, name)
            if value is not None and not is_token_count(value):
                return name
        for name in _TIMES:
            if not _is_int64(getattr(self, name)):
                return name
        if self.answer_stamp_ns is not None and not _is_int64(self.answer_stamp_ns):
            return "answer_stamp_ns"
        if self.count_source not in COUNT_SOURCES:  # it names a counter: never any text
            return "count_source"
        # k_i other than 1 come only from the server: only then are they summed
        counts = self.token_counts
        from_server = self.counts_from_usage or self.count_source != ESTIMATED_COUNT_SOURCE
        if from_server and counts and (min(counts) < 1 or sum(counts) > MAX_TOKEN_COUNT):
            return "token_counts"
        return None

    def refuse_out_of_range(self) -> bool:
        """Counts a request holding such a number as failed (``client_error``: every number
        from a server is checked where it is decoded, so this is a bug or a locustfile's
        own value), with the numbers zeroed so that no later step meets them; whether it
        did. Called before the request is recorded."""
        name = self.out_of_range()
        if name is None:
            return False
        self.error_category = CLIENT_ERROR
        self.error_message = f"{name} out of range: {_described(getattr(self, name))}"
        self.output_tokens = self.prompt_tokens_requested = self.reasoning_tokens = 0
        self.prompt_tokens_reported = self.cached_prompt_tokens = self.answer_stamp_ns = None
        self.count_source = ESTIMATED_COUNT_SOURCE
        self.token_stamps, self.token_counts = int_array(), int_array()
        for time_name in _TIMES:
            if not _is_int64(getattr(self, time_name)):
                setattr(self, time_name, 0)
        return True

    def itl_ns(self) -> np.ndarray:
        """One gap per token event after the first: the stall a reader sees."""
        return np.diff(np.asarray(self.token_stamps, dtype=np.int64))

    def tokens_per_event(self) -> np.ndarray | None:
        """k_i of every token event; None when each carried one token."""
        counts = self.token_counts
        if counts.count(1) == len(counts):
            return None
        return np.asarray(counts, dtype=np.int64)

    def tokens_after_first(self) -> np.ndarray | None:
        """k_i of each token event after the first; None when each carried one token."""
        after = self.token_counts[1:]
        if after.count(1) == len(after):
            return None
        return np.asarray(after, dtype=np.int64)

    def tpot_ns(self) -> np.ndarray:
        """One sample per output token after the first: event i>1 gives k_i x gap_i/k_i."""
        return tpot_samples_ns(self.itl_ns(), self.tokens_after_first())


class StreamSoFar(Protocol):
    """A stream while it goes, as its live counter reads it (never writes): when it was
    sent, the arrival of each token event and the tokens each carried (both growing as
    events arrive), its first answer event, and what its connection says so far. The
    wire's streams are these (``wire.streaming``); the recorder's ``TokenFlow`` reads them."""

    @property
    def t_send_ns(self) -> int: ...

    @property
    def token_stamps(self) -> array[int]: ...

    @property
    def token_counts(self) -> array[int]: ...

    @property
    def answer_stamp_ns(self) -> int | None: ...

    def stamps_recovered(self) -> bool: ...

    def retransmitted(self) -> bool: ...


def _described(value: object) -> str:
    """A value for a message, never the whole of a huge integer or array."""
    if type(value) is int and abs(value) > INT64_MAX:
        return f"an integer of about {int(value.bit_length() * 0.30103) + 1} digits"
    if isinstance(value, array):
        return f"{len(value)} counts summing to {sum(value)}"
    return repr(value)[:60]


def tpot_samples_ns(gaps_ns: np.ndarray, tokens: np.ndarray | None) -> np.ndarray:
    """TPOT samples of gaps between token events: a gap before an event of k tokens gives
    k samples of gap / k (``tokens`` None: one token per event, the gaps themselves)."""
    return gaps_ns if tokens is None else np.repeat(gaps_ns / tokens, tokens)


def to_us(values_ns: npt.ArrayLike) -> np.ndarray:
    """Nanoseconds to whole microseconds, rounded to nearest (histogram unit)."""
    return np.rint(np.asarray(values_ns, dtype=np.float64) / NS_PER_US).astype(np.int64)
