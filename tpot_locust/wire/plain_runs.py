"""Reads that are runs of plain token events, taken in one pass instead of event by event.

Why: once reads may come late (every segment stamped by the tap, ``loop_reads`` batching),
a read holds several events, and taking each through the chunked decoder, the SSE parser
and the decoder cost more than the read itself (``benchmarks/README.md``, stamp_cost). A
streaming server's events are one chunk each, in one frame (``StreamDecoder.event_frame``),
so one split on the frame's tail finds them all: the whole chunks of such events a read
begins with are recorded at once, each event with the stamp of the segment that brought its
last byte (the stamp the pieces of ``SegmentTrack.cut`` would have given it). Anything
else (a part of a chunk, a finish, usage, an error, another frame) and all after it go the
usual way: both ways give identical timings (tested).
"""

from __future__ import annotations

from bisect import bisect_left
from typing import TYPE_CHECKING

from tpot_locust.common.errors import TIMEOUT_TOTAL, StreamError
from tpot_locust.wire.chunked import HEX_DIGITS, MAX_SIZE_DIGITS
from tpot_locust.wire.stamped_socket import Split
from tpot_locust.wire.stream_decoder import NOT_IN_EVENT_TEXT

if TYPE_CHECKING:
    from tpot_locust.wire.deadline import Deadline
    from tpot_locust.wire.http_response import Response
    from tpot_locust.wire.sse import SSEParser
    from tpot_locust.wire.stream_decoder import StreamDecoder

_CRLF = 2
_BACKSLASH = 92


class PlainRuns:
    """One stream's runs: ``splitter`` for the next read (or None), ``take`` for a run."""

    __slots__ = (
        "_deadline",
        "_decoder",
        "_frame",
        "_parser",
        "_response",
        "_split",
        "_total_timeout",
    )

    def __init__(
        self,
        response: Response,
        parser: SSEParser,
        decoder: StreamDecoder,
        deadline: Deadline,
        total_timeout: float,
    ) -> None:
        self._response = response
        self._parser = parser
        self._decoder = decoder
        self._deadline = deadline
        self._total_timeout = total_timeout
        self._frame: tuple[bytes, bytes] | None = None
        self._split: Split | None = None

    def splitter(self) -> Split | None:
        """What finds a run in the next read; None while the stream is not between whole
        events of a known frame (each read then goes the usual way)."""
        frame = self._decoder.event_frame
        if frame is None or not self._response.between_chunks or not self._parser.at_event_start(0):
            return None
        if frame is not self._frame:
            head, tail = frame
            self._split = _chunk_splitter(head, tail, self._parser.max_event_bytes)
            self._frame = frame
        return self._split

    def take_pieces(self, pieces: list[tuple[bytes, int]]) -> list[tuple[bytes, int]] | None:
        """Pieces already read (those that came with the head), taken as one run as far as
        they are one: the pieces left for the usual way, or None when no run begins them
        (each event's stamp is that of the piece that brought its last byte)."""
        split = self.splitter()
        if split is None or len(pieces) < 2:
            return None  # one piece goes the usual way as cheaply
        found = split(b"".join([data for data, _ in pieces]))
        if found is None:
            return None
        texts, lasts, used = found
        stamps = [pieces[0][1]]
        index, end = 0, len(pieces[0][0])
        for last in lasts:
            while end <= last:
                index += 1
                end += len(pieces[index][0])
            stamps.append(pieces[index][1])
        self.take(texts, stamps)
        while end <= used:  # the pieces the run ended with
            index += 1
            if index == len(pieces):
                return []
            end += len(pieces[index][0])
        data, stamp = pieces[index]
        return [(data[len(data) - (end - used) :], stamp), *pieces[index + 1 :]]

    def take(self, texts: list[bytes], stamps: list[int]) -> None:
        """Record a run (``stamps``: its first byte's, then each event's), and move the
        deadline as each event would; raises the total timeout as the event that came
        after it would have, once the events before it and that one are recorded."""
        events = stamps[1:]
        end_ns = self._deadline.end_ns
        if events[-1] >= end_ns:
            cut = bisect_left(events, end_ns) + 1
            self._decoder.feed_run(events[:cut], texts[:cut])
            self._deadline.arrived(events[cut - 1])
            raise StreamError(TIMEOUT_TOTAL, f"stream exceeded {self._total_timeout:g} s")
        self._decoder.feed_run(events, texts)
        self._deadline.arrived(events[-1])


def _chunk_splitter(head: bytes, tail: bytes, max_event_bytes: int) -> Split:
    """A ``Split`` for reads that begin with whole chunks, each one event ``head + text +
    tail``: it finds the longest such beginning (``used`` bytes; None when there is none).

    Cut where each such chunk ends (its tail and CRLF: a text has no quote, so the tail,
    which begins with one, is never in it), each part is a size line, the head and a text;
    a regular expression over the events took ~9 us an event, this ~2."""
    separator = tail + b"\r\n"
    fixed, text_at = len(head) + len(tail), len(head) + _CRLF

    def split(data: bytes) -> tuple[list[bytes], list[int], int] | None:
        parts = data.split(separator)
        if len(parts) < 3:
            return None  # one event at most: the usual way is as cheap
        texts, lasts, end = [], [], 0
        for part in parts[:-1]:
            line_end = part.find(b"\r\n", 0, _SIZE_LINE_MOST)
            text = part[line_end + text_at :]
            size = fixed + len(text)
            digits = part[:line_end]
            if (
                line_end <= 0
                or digits.translate(None, HEX_DIGITS)
                or int(digits, 16) != size
                or not part.startswith(head, line_end + _CRLF)
                or not text
                or len(text.translate(None, NOT_IN_EVENT_TEXT)) != len(text)
                or text[-1] == _BACKSLASH
                or size > max_event_bytes
            ):
                break  # another frame, or for the chunked decoder or SSE parser to judge
            end += line_end + _CRLF + size
            lasts.append(end - 1)  # the event's last byte: its blank line's
            end += _CRLF
            texts.append(text)
        return (texts, lasts, end) if texts else None

    return split


_SIZE_LINE_MOST = MAX_SIZE_DIGITS + _CRLF
