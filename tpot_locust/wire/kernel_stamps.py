"""Kernel receive stamps: when a read's data reached the socket, however late we read it.

Linux stamps every received segment in the kernel (``SO_TIMESTAMPNS``, CLOCK_REALTIME); a
read then carries the arrival time of its last segment as a control message. Python does
not export the constant; 35 is its value on x86, arm and most other Linuxes (elsewhere no
such control message comes back and reads fall back to the user clock).
"""

from __future__ import annotations

import os
import socket
import struct
import sys

SO_TIMESTAMPNS = 35
_TIMESPEC = struct.Struct("@qq")
ANCILLARY_BYTES = socket.CMSG_SPACE(_TIMESPEC.size) if hasattr(socket, "CMSG_SPACE") else 0
KERNEL_CLOCK = "kernel"  # SO_TIMESTAMPNS: when the data reached the socket
USER_CLOCK = "user"  # perf_counter_ns when recv returned: includes event-loop delay


def arrival_clock() -> str:
    """The clock plain-TCP reads are stamped with in this process (TLS reads: always user).

    ``TPOT_LOCUST_STAMPS=user`` turns kernel stamps off, e.g. to compare both.
    """
    if os.environ.get("TPOT_LOCUST_STAMPS", KERNEL_CLOCK) == USER_CLOCK:
        return USER_CLOCK
    return KERNEL_CLOCK if sys.platform.startswith("linux") and ANCILLARY_BYTES else USER_CLOCK


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
