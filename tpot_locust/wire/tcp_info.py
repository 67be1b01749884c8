"""What the kernel counted on a TCP connection (``TCP_INFO``): its retransmissions.

A token gap that spans a retransmission is the network's, not the server's: a lost
segment waits at least one retransmission timeout (200 ms on Linux) before it arrives.
Linux's ``struct tcp_info`` has ``tcpi_total_retrans`` (u32) at byte 100: eight u8 fields,
then 23 u32 ones before it (``include/uapi/linux/tcp.h``, stable since 2.6). Elsewhere, or
on a socket that cannot say, there is no count (None).
"""

from __future__ import annotations

import socket
import struct
import sys

_TOTAL_RETRANS = struct.Struct("=I")
_TOTAL_RETRANS_AT = 100
_INFO_BYTES = 104


def total_retransmits(sock: socket.socket | None) -> int | None:
    """Segments the kernel retransmitted on ``sock`` since it opened, or None."""
    if sock is None or not sys.platform.startswith("linux"):
        return None
    try:
        info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, _INFO_BYTES)
    except (OSError, AttributeError, ValueError):
        return None
    if len(info) < _TOTAL_RETRANS_AT + _TOTAL_RETRANS.size:
        return None
    return _TOTAL_RETRANS.unpack_from(info, _TOTAL_RETRANS_AT)[0]
