"""The end watch: a wake-up when a body read in batches ends, not at its batch's next tick.

Why: a body read in batches (``loop_reads``) is read once a period, so its end would be
noticed up to a period late and a closed-loop user would send its next request that much
later (fewer requests a second than reading at once). This packet socket hears only the
segments that end a body (a chunked body's last chunk, a FIN, a reset: the kernel's filter,
``tap_filter.ends_filter``, looks at the payload and copies only the headers), one a
request, so waking for them costs nothing per token. The connection it names is then read
at once until its body ends. Where the copy comes before TCP has queued the data (a tap
hears a frame first), the read at once waits for the socket to become readable.
"""

from __future__ import annotations

import _socket  # never gevent's: read without waiting, from the event loop's callback
import struct
from collections.abc import Callable
from typing import Any

from gevent import get_hub

from tpot_locust.wire.segment_stamps import HEADER_BYTES, packet_socket, track_key
from tpot_locust.wire.tap_filter import attach, ends_filter

_READ = 1  # libev/libuv: watch for readability
_PORTS = struct.Struct("!HH")  # source and destination port
OnEnd = Callable[[], None]


class EndWatch:
    """This process's packet socket for segments that end a body; each connection expected
    (by its tap key, ``segment_stamps.track_key``) gets its ``on_end`` called once."""

    def __init__(self, sock: _socket.socket) -> None:
        self._sock = sock
        self._ports: set[int] = set()
        self._expected: dict[int, OnEnd] = {}
        self._watcher: Any | None = None  # gevent's io watcher, while a connection is expected
        self.heard = 0  # copies heard (ends, and chunks that looked like one)

    @classmethod
    def open(cls) -> EndWatch | None:
        """The watch, or None where this process may not open a packet socket."""
        sock = packet_socket()
        if sock is None:
            return None
        try:
            attach(sock, ends_filter([]))
            sock.setblocking(False)
        except OSError:
            sock.close()
            return None
        watch = cls(sock)
        watch._take_all()  # copies that came before the filter was attached
        return watch

    def expect(self, key: int, on_end: OnEnd) -> None:
        """Call ``on_end`` when a segment that ends a body comes on connection ``key``."""
        port = (key >> 32) & 0xFFFF
        if port not in self._ports:
            self._ports.add(port)
            attach(self._sock, ends_filter(sorted(self._ports)))
        self._expected[key] = on_end
        if self._watcher is None:
            self._watcher = get_hub().loop.io(self._sock.fileno(), _READ)
            self._watcher.start(self._take_all)

    def cancel(self, key: int) -> None:
        """The connection's body read ended (or is no longer read in batches)."""
        self._expected.pop(key, None)
        if not self._expected and self._watcher is not None:
            self._watcher.close()
            self._watcher = None

    def close(self) -> None:
        if self._watcher is not None:
            self._watcher.close()
            self._watcher = None
        self._sock.close()

    def _take_all(self) -> None:
        """Every copy waiting, each handed to its connection's ``on_end``."""
        recv = self._sock.recv
        while True:
            try:
                packet = recv(HEADER_BYTES)
            except BlockingIOError:
                return
            except OSError:
                return  # a copy lost: that body's end is found at its batch's next tick
            self.heard += 1
            header = (packet[0] & 15) * 4
            if len(packet) < header + 4:
                continue
            source_port, local_port = _PORTS.unpack_from(packet, header)
            address = int.from_bytes(packet[12:16], "big")
            on_end = self._expected.pop(track_key(local_port, source_port, address), None)
            if on_end is not None:
                on_end()
