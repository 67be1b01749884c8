"""When the next byte of one request must have come: the request's only deadline.

A request gets one ``Deadline``; ``HTTPConnection.request`` starts it at the send and hands
it to its ``Response``, both read loops (the greenlet's and the event loop's) wait at most
until ``at_ns``, and whoever reads the body moves it when something arrives that counts:
an event for a stream (``streaming``), any read for a plain body (``Response.read``).
Nothing else keeps a timeout, so what ended a request is read off this one object.
"""

from __future__ import annotations

NEVER_NS = 1 << 62  # the year 2116 on the stamp clock (``common.clock``): a limit that never comes


def _limit_ns(seconds: float) -> int:
    """A limit in ns; one that is not a finite number below ``NEVER_NS`` (inf, NaN: the
    scenario loader refuses them, a locustfile may not) never comes, rather than raising
    at every request."""
    if not (0 <= seconds < NEVER_NS / 1e9):  # False for NaN too
        return NEVER_NS if not seconds < 0 else 0
    return int(seconds * 1e9)


class Deadline:
    """The first arrival within ``first_s`` of the send, each later one within ``idle_s``
    of the previous, everything within ``total_s`` (None: no overall limit)."""

    __slots__ = ("at_ns", "end_ns", "last_arrival_ns", "_first_ns", "_idle_ns", "_total_ns")

    def __init__(self, first_s: float, idle_s: float, total_s: float | None = None) -> None:
        self._first_ns = _limit_ns(first_s)
        self._idle_ns = _limit_ns(idle_s)
        self._total_ns = None if total_s is None else _limit_ns(total_s)
        self.at_ns = self.end_ns = NEVER_NS
        self.last_arrival_ns = 0  # 0 until something that counts arrived

    @classmethod
    def per_read(cls, timeout_s: float) -> Deadline:
        """Each read within ``timeout_s`` of the send or the previous read."""
        return cls(timeout_s, timeout_s)

    def start(self, send_ns: int) -> None:
        """The send: every limit runs from here (again, when a send is retried)."""
        self.end_ns = NEVER_NS if self._total_ns is None else send_ns + self._total_ns
        first_ns = send_ns + self._first_ns
        self.at_ns = first_ns if first_ns < self.end_ns else self.end_ns
        self.last_arrival_ns = 0

    def arrived(self, stamp_ns: int) -> None:
        """Something that counts arrived at ``stamp_ns``: the idle limit runs from it."""
        self.last_arrival_ns = stamp_ns
        next_ns = stamp_ns + self._idle_ns
        self.at_ns = next_ns if next_ns < self.end_ns else self.end_ns

    def ending(self, stamp_ns: int, grace_s: float) -> None:
        """The stream's final event came at ``stamp_ns``: the body may go on (its last chunk,
        trailers) ``grace_s`` more at most; a server that never ends it holds nobody longer."""
        end_ns = stamp_ns + _limit_ns(grace_s)
        if end_ns < self.end_ns:
            self.end_ns = end_ns
            self.at_ns = min(self.at_ns, end_ns)

    def timeout_s(self, now_ns: int) -> float:
        """Seconds left until ``at_ns`` (<= 0: it has passed)."""
        return (self.at_ns - now_ns) / 1e9

    @property
    def missed(self) -> str:
        """Which limit a read that came too late broke: ``total``, ``first`` or ``idle``."""
        if self.at_ns >= self.end_ns:
            return "total"
        return "idle" if self.last_arrival_ns else "first"
