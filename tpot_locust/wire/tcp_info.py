"""What the kernel saw of retransmissions on a TCP connection (``TCP_INFO``).

A token gap that spans a lost segment is the network's, not the server's: a lost segment
waits for its retransmission (at least one timeout, 200 ms on Linux, or the fast
retransmit's round trip) before it arrives. Two counters of Linux's ``struct tcp_info``
(``include/uapi/linux/tcp.h``) say so on the client's socket:

- ``tcpi_total_retrans`` (u32 at byte 100): segments *we* sent again (a lost request);
- ``tcpi_rcv_ooopack`` (u32 at byte 224, Linux 5.4+): packets that arrived out of order,
  that is after a hole the *server's* lost segment left, which it resends. A server's
  retransmission never shows in our ``total_retrans``: measured here behind a lossy
  router, 36 server resends, our count 0 on every request, theirs 8-20 each.

Their sum is ``retransmissions``. A lost last segment with nothing behind it leaves no
hole and goes unseen. Elsewhere, or on a socket that cannot say, there is no count (None).
"""

from __future__ import annotations

import socket
import struct
import sys

_U32 = struct.Struct("=I")
_TOTAL_RETRANS_AT = 100
_RCV_OOOPACK_AT = 224
_INFO_BYTES = 232


def retransmissions(sock: socket.socket | None) -> int | None:
    """Segments retransmitted on ``sock`` since it opened, ours and (seen as out-of-order
    arrivals) the server's; None where the kernel cannot say."""
    if sock is None or not sys.platform.startswith("linux"):
        return None
    try:
        info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, _INFO_BYTES)
    except (OSError, AttributeError, ValueError):
        return None
    if len(info) < _TOTAL_RETRANS_AT + _U32.size:
        return None
    ours: int = _U32.unpack_from(info, _TOTAL_RETRANS_AT)[0]
    theirs: int = (
        _U32.unpack_from(info, _RCV_OOOPACK_AT)[0] if len(info) >= _RCV_OOOPACK_AT + 4 else 0
    )
    return ours + theirs
