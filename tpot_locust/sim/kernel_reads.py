"""Reading a plain-TCP connection ourselves, so that each read carries the kernel's stamp.

Why: the truth's TTFT starts when a request arrived. Stamped when the loop got to it, it
included the simulator's own loop delay (TTFT truth was +0.3-0.9 ms off at p50-p99 in the
quickstart); the kernel's receive stamp of the read that brought its first bytes is when
they reached this host, as the client's TTFT starts at its send. asyncio's transport reads
with ``recv`` and drops that stamp, so here a duplicate of the connection's socket is read
with ``recvmsg`` on the same loop while the transport keeps writing and closing. TLS
connections keep asyncio's reads (their arrival: when the loop got to them). The same
duplicate reads the connection's transmit stamps (``send_stamps``), where they are asked for.
"""

from __future__ import annotations

import asyncio
import os
import socket
import time
from collections.abc import Callable

from ..common.kernel_stamps import (
    ANCILLARY_BYTES,
    MAX_KERNEL_AGE_NS,
    enable_kernel_stamps,
    kernel_wall_ns,
)
from .send_stamps import SendStamps

READ_BYTES = 256 * 1024
Deliver = Callable[[bytes, int], None]  # (bytes, arrival perf_counter_ns)


class KernelReads:
    """The reads of one connection, each handed on with its kernel stamp (perf ns)."""

    def __init__(
        self,
        transport: asyncio.Transport,
        sock: socket.socket,
        deliver: Deliver,
        to_perf_ns: Callable[[int], int],
    ) -> None:
        self._transport = transport
        self._sock = sock
        self._deliver = deliver
        self._to_perf_ns = to_perf_ns
        self._loop = asyncio.get_running_loop()
        self._reading = False
        self.send_stamps: SendStamps | None = None

    @classmethod
    def take_over(
        cls,
        transport: asyncio.Transport,
        deliver: Deliver,
        to_perf_ns: Callable[[int], int],
        stamp_sends: bool = False,
    ) -> KernelReads | None:
        """Read ``transport``'s socket from now on (its own reading paused for good), and
        with ``stamp_sends`` its transmit stamps (before anything was written); None where
        it cannot be (TLS, no kernel stamps): asyncio's reads go on."""
        raw = transport.get_extra_info("socket")
        if raw is None or transport.get_extra_info("sslcontext") is not None:
            return None
        if not ANCILLARY_BYTES or raw.family not in (socket.AF_INET, socket.AF_INET6):
            return None
        sock = socket.socket(fileno=os.dup(raw.fileno()))
        sock.setblocking(False)
        if not enable_kernel_stamps(sock):
            sock.close()
            return None
        transport.pause_reading()
        reads = cls(transport, sock, deliver, to_perf_ns)
        if stamp_sends:
            reads.send_stamps = SendStamps.enable(sock)
        reads.resume()
        return reads

    def pause(self) -> None:
        if self._reading:
            self._loop.remove_reader(self._sock.fileno())
            self._reading = False

    def resume(self) -> None:
        if not self._reading and self._sock.fileno() >= 0:
            self._loop.add_reader(self._sock.fileno(), self._readable)
            self._reading = True

    def close(self) -> None:
        """The connection was lost: our duplicate goes too (its last descriptor)."""
        self.pause()
        self._sock.close()

    def _readable(self) -> None:
        if self.send_stamps is not None:
            self.send_stamps.collect()  # a stamp waiting makes the socket "readable" too
        try:
            data, ancillary, _, _ = self._sock.recvmsg(READ_BYTES, ANCILLARY_BYTES)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:  # reset, aborted: as asyncio's transport would, drop it
            self.pause()
            self._transport.abort()
            return
        now_ns = time.perf_counter_ns()
        if not data:  # the client closed its side: as asyncio's default, close ours
            self.pause()
            self._transport.close()
            return
        stamp_ns = now_ns
        wall_ns = kernel_wall_ns(ancillary)
        if wall_ns is not None:
            kernel_ns = self._to_perf_ns(wall_ns)
            if now_ns - MAX_KERNEL_AGE_NS <= kernel_ns <= now_ns:
                stamp_ns = kernel_ns
        self._deliver(data, stamp_ns)
