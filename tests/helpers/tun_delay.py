"""A network path with a round trip of its own, where the kernel has no netem: a namespace
reached through a pair of TUN devices, and a forwarder that holds every IP packet a fixed
time before it hands it on.

Both ends keep their own TCP (the forwarder moves whole IP packets and never touches TCP),
so delayed acknowledgements, congestion windows and retransmissions behave as across a real
link of that delay; the link's MTU is Ethernet's (1500). ``python -m tests.helpers.tun_delay
HOST_DEV NETNS NETNS_DEV DELAY_MS`` is the forwarder (run by ``DelayedLink``); it needs root.
"""

from __future__ import annotations

import ctypes
import fcntl
import heapq
import os
import select
import struct
import subprocess
import sys
import time
from dataclasses import dataclass

from tests.conftest import ROOT
from tpot_locust.common.child_process import child_options

_TUNSETIFF = 0x400454CA
_IFF_TUN, _IFF_NO_PI = 0x0001, 0x1000
_CLONE_NEWNET = 0x40000000
_MTU = 1500


def open_tun(name: str) -> int:
    """A file descriptor of the TUN device ``name`` of this thread's network namespace."""
    fd = os.open("/dev/net/tun", os.O_RDWR)
    fcntl.ioctl(fd, _TUNSETIFF, struct.pack("16sH22x", name.encode(), _IFF_TUN | _IFF_NO_PI))
    os.set_blocking(fd, False)
    return fd


def enter_netns(netns: str) -> None:
    """This thread into the named network namespace (``ip netns``'s)."""
    with open(f"/var/run/netns/{netns}") as handle:
        if ctypes.CDLL(None, use_errno=True).setns(handle.fileno(), _CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns {netns}")


def forward(ends: tuple[int, int], delay_s: float) -> None:
    """Every packet read from one end written to the other ``delay_s`` later, in order."""
    other = {ends[0]: ends[1], ends[1]: ends[0]}
    due: list[tuple[float, int, int, bytes]] = []  # (when, sequence, to, packet)
    sequence = 0
    while True:
        wait = max(0.0, due[0][0] - time.monotonic()) if due else 1.0
        ready, _, _ = select.select(list(ends), [], [], wait)
        now = time.monotonic()
        for fd in ready:
            while True:
                try:
                    packet = os.read(fd, 65536)
                except BlockingIOError:
                    break
                sequence += 1
                heapq.heappush(due, (now + delay_s, sequence, other[fd], packet))
        while due and due[0][0] <= time.monotonic():
            _, _, to, packet = heapq.heappop(due)
            try:
                os.write(to, packet)
            except OSError:
                pass  # a full queue drops it, as a link does


@dataclass
class DelayedLink:
    """``netns``, reached from here at ``address`` (its end at ``host_address``) through a
    forwarder that adds ``delay_ms`` each way; ``close`` undoes all of it."""

    netns: str
    host_dev: str
    netns_dev: str
    host_address: str
    address: str
    delay_ms: float
    forwarder: subprocess.Popen[bytes] | None = None

    def open(self) -> None:
        run = _checked
        run("ip", "netns", "add", self.netns)
        run("ip", "tuntap", "add", "dev", self.host_dev, "mode", "tun")
        run("ip", "-n", self.netns, "tuntap", "add", "dev", self.netns_dev, "mode", "tun")
        for prefix, dev, here, there in (
            ((), self.host_dev, self.host_address, self.address),
            (("-n", self.netns), self.netns_dev, self.address, self.host_address),
        ):
            run("ip", *prefix, "addr", "add", f"{here}/32", "peer", there, "dev", dev)
            run("ip", *prefix, "link", "set", dev, "mtu", str(_MTU), "up")
        run("ip", "-n", self.netns, "link", "set", "lo", "up")
        command = [sys.executable, "-m", "tests.helpers.tun_delay", self.host_dev, self.netns]
        command += [self.netns_dev, str(self.delay_ms)]
        self.forwarder = subprocess.Popen(command, cwd=ROOT, **child_options())  # dies with us

    def close(self) -> None:
        if self.forwarder is not None:
            self.forwarder.kill()
            self.forwarder.wait()
        subprocess.run(["ip", "netns", "del", self.netns], capture_output=True, check=False)
        subprocess.run(["ip", "link", "del", self.host_dev], capture_output=True, check=False)


def _checked(*command: str) -> None:
    result = subprocess.run(command, capture_output=True, text=True, timeout=10)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(command)}: {result.stderr.strip()}")


def main(argv: list[str]) -> None:
    host_dev, netns, netns_dev, delay_ms = argv
    host_end = open_tun(host_dev)
    enter_netns(netns)
    forward((host_end, open_tun(netns_dev)), float(delay_ms) / 1000)


if __name__ == "__main__":
    main(sys.argv[1:])
