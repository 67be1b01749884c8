"""Kernel receive stamps: when a read's data reached the socket, however late we read it.

Linux stamps every received segment in the kernel (``SO_TIMESTAMPNS``, CLOCK_REALTIME); a
read then carries the arrival time of its last segment as a control message. Python does
not export the constant; 35 is its value on x86, arm and most other Linuxes (elsewhere no
such control message comes back and reads fall back to the user clock).
"""

from __future__ import annotations

import socket
import struct
import sys

from tpot_locust.common import env_vars
from tpot_locust.common.clock import ARRIVAL_CLOCKS, SEGMENT_CLOCK, USER_CLOCK

SO_TIMESTAMPNS = 35
_TIMESPEC = struct.Struct("@qq")
ANCILLARY_BYTES = socket.CMSG_SPACE(_TIMESPEC.size) if hasattr(socket, "CMSG_SPACE") else 0
# A kernel stamp further back than this from its read is a clock step, not a late read: not
# trusted (the client's reads and the simulator's alike).
MAX_KERNEL_AGE_NS = 10 * 1_000_000_000


def wanted_clock() -> str:
    """The best clock this platform has, or a lesser one ``TPOT_LOCUST_STAMPS`` asks for
    (``segment_stamps.arrival_clock``: the one a process gets)."""
    asked = env_vars.text(env_vars.STAMPS, SEGMENT_CLOCK)
    if asked not in ARRIVAL_CLOCKS:
        raise ValueError(
            f"{env_vars.STAMPS}={asked[:20]!r}: not one of {', '.join(ARRIVAL_CLOCKS)}"
        )
    if not (sys.platform.startswith("linux") and ANCILLARY_BYTES):
        return USER_CLOCK
    return asked


def enable_kernel_stamps(sock: socket.socket) -> bool:
    """Ask the kernel to stamp this socket's reads; whether it agreed."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    except OSError:
        return False
    return True


def kernel_wall_ns(ancillary: list[tuple[int, int, bytes]]) -> int | None:
    """The receive stamp in a ``recvmsg`` read's control messages (wall-clock ns), if any."""
    stamp = None
    for level, kind, data in ancillary:
        if kind == SO_TIMESTAMPNS and level == socket.SOL_SOCKET and len(data) >= 16:
            seconds, nanoseconds = _TIMESPEC.unpack_from(data)
            stamp = seconds * 1_000_000_000 + nanoseconds
    return stamp
