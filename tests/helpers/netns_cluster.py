"""A Locust cluster on separate hosts: the simulator, the master and each worker in a network
namespace of its own, each joined to a router namespace by a veth pair, with real distinct
addresses (``10.252.T.0/24``, a /30 per link; no 127.0.0.1 between them).

    sim ----\\
    master --+-- router (forwards; tc and ip rules there make the faults)
    relay ---+
    w0, w1 -/

``build_net`` makes the namespaces and links and deletes every one of them afterwards,
whatever happened (the processes started in them first); it skips the test, saying why,
where namespaces cannot be made. Processes start with ``ip netns exec NS ...``, which execs
the program itself: its pid is the program's, so signals reach it.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import pytest

from tests.conftest import ROOT
from tests.helpers.netns import environment, free_third_octet, in_netns, ip
from tpot_locust.common.child_process import child_options

__all__ = ["Host", "Net", "build_net"]

PREFIX = "10.252"
LOCUSTFILE = str(ROOT / "tests/helpers/locust_distributed.py")
RELAY = str(ROOT / "tests/helpers/tcp_relay.py")
MASTER_PORT = 5557
SIM_PORT = 8000


@dataclass(frozen=True)
class Host:
    role: str  # "sim", "master", "w0", ...
    netns: str
    address: str
    gateway: str  # the router's address on this host's link
    link: str  # the host's end of its veth pair
    router_link: str  # the router's end
    subnet: str  # the link's /30


@dataclass
class Net:
    """The namespaces of one test, and every process started in them."""

    suffix: str
    router: str
    hosts: dict[str, Host]
    logs: Path
    processes: list[subprocess.Popen[str]] = field(default_factory=list)
    _files: list[IO[str]] = field(default_factory=list)

    def __getitem__(self, role: str) -> Host:
        return self.hosts[role]

    def router_ip(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return ip(*args, netns=self.router, check=check)

    def start(
        self, role: str, name: str, *command: str, env: dict[str, str] | None = None
    ) -> subprocess.Popen[str]:
        """``command`` in ``role``'s namespace, its output in ``logs/NAME.log``."""
        log = (self.logs / f"{name}.log").open("w")
        self._files.append(log)
        process = subprocess.Popen(
            ["ip", "netns", "exec", self.hosts[role].netns, *command],
            stdout=log,
            stderr=subprocess.STDOUT,
            text=True,
            env=environment(env),
            cwd=ROOT,
            **child_options(),
        )
        self.processes.append(process)
        return process

    def log(self, name: str) -> str:
        path = self.logs / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def start_master(
        self,
        out: Path,
        workers: int,
        users: int,
        run_time: str,
        *extra: str,
        bind_host: str | None = None,
        env: dict[str, str] | None = None,
    ) -> subprocess.Popen[str]:
        """A headless master in ``master``'s namespace, on its address (or ``bind_host``),
        port ``MASTER_PORT``, against the simulator's address; once it listens."""
        master = self.start(
            "master",
            "master",
            sys.executable,
            "-m",
            "locust",
            "-f",
            LOCUSTFILE,
            "--master",
            "--headless",
            "--expect-workers",
            str(workers),
            "--expect-workers-max-wait",
            "60",
            "--master-bind-host",
            bind_host or self["master"].address,
            "--master-bind-port",
            str(MASTER_PORT),
            "-u",
            str(users),
            "-r",
            str(users),
            "-t",
            run_time,
            "--host",
            f"http://{self['sim'].address}:{SIM_PORT}",
            "--tpot-out",
            str(out),
            *extra,
            env=env,
        )
        self.wait_listening("master", MASTER_PORT, master)
        return master

    def wait_listening(
        self,
        role: str,
        port: int,
        process: subprocess.Popen[str] | None = None,
        timeout_s: float = 60,
    ) -> None:
        """Until a TCP socket listens on ``port`` in ``role``'s namespace (``/proc/net/tcp``:
        nothing connects to it to find out), while ``process`` runs."""
        wanted = f":{port:04X} "
        deadline = time.monotonic() + timeout_s
        while True:
            table = in_netns(self.hosts[role].netns, "cat", "/proc/net/tcp").stdout
            listening = [row.split() for row in table.splitlines()[1:] if wanted in row]
            if any(
                fields[1].endswith(wanted.strip()) and fields[3] == "0A" for fields in listening
            ):
                return
            if process is not None and process.poll() is not None:
                raise RuntimeError(
                    f"it exited ({process.returncode}) before listening on "
                    f"{role}:{port}: {self.log(role)[-2000:]}"
                )
            if time.monotonic() > deadline:
                raise RuntimeError(f"nothing listens on {role}:{port} after {timeout_s} s")
            time.sleep(0.1)

    def start_worker(
        self,
        role: str,
        out: Path,
        master: tuple[str, int] | None = None,
        env: dict[str, str] | None = None,
    ) -> subprocess.Popen[str]:
        """A worker in ``role``'s namespace, connecting to ``master`` (default: the master's
        address), saving its audit to ``out/workers/<id>.json``."""
        host, port = master or (self["master"].address, MASTER_PORT)
        return self.start(
            role,
            role,
            sys.executable,
            "-m",
            "locust",
            "-f",
            LOCUSTFILE,
            "--worker",
            "--master-host",
            host,
            "--master-port",
            str(port),
            "--tpot-out",
            str(out),
            env=env,
        )

    def start_relay(
        self,
        role: str,
        listen_port: int,
        target: tuple[str, int],
        delay_ms: tuple[float, float],
        timeout_s: float = 20,
    ) -> subprocess.Popen[str]:
        """``tcp_relay.py`` in ``role``'s namespace, on its address, once it listens."""
        from tests.helpers.tcp_relay import READY

        process = self.start(
            role,
            "relay",
            sys.executable,
            RELAY,
            self[role].address,
            str(listen_port),
            target[0],
            str(target[1]),
            "--delay-ms",
            str(delay_ms[0]),
            str(delay_ms[1]),
        )
        deadline = time.monotonic() + timeout_s
        while READY not in self.log("relay"):
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"relay did not start: {self.log('relay')[-2000:]}")
            time.sleep(0.05)
        return process

    def pids(self, role: str) -> list[int]:
        """Every process in ``role``'s namespace (all started here: the namespace is ours)."""
        listed = ip("netns", "pids", self.hosts[role].netns, check=False).stdout.split()
        return [int(pid) for pid in listed if pid.isdigit()]

    def kill_host(self, role: str) -> list[int]:
        """SIGKILL every process of ``role``'s namespace (a host that dies); their pids."""
        pids = self.pids(role)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        return pids

    def drop_stats(self, device: str) -> dict[str, int]:
        """Packets sent and dropped by the root qdisc of the router's ``device``."""
        shown = in_netns(
            self.router, "tc", "-s", "-j", "qdisc", "show", "dev", device, check=False
        ).stdout
        for qdisc in json.loads(shown or "[]"):
            if qdisc.get("root"):
                return {"packets": qdisc.get("packets", 0), "drops": qdisc.get("drops", 0)}
        return {"packets": 0, "drops": 0}

    def stop_all(self, timeout_s: float = 15) -> None:
        """Every process started here: SIGTERM, then SIGKILL what is left; then whatever
        else runs in the namespaces (their children)."""
        for process in self.processes:
            if process.poll() is None:
                process.terminate()
        deadline = time.monotonic() + timeout_s
        for process in self.processes:
            try:
                process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(5)
        for role in self.hosts:
            self.kill_host(role)
        for file in self._files:
            file.close()


def _link_name(suffix: str, end: str, index: int) -> str:
    return f"tc{suffix}{end}{index}"  # at most 15 characters: tc + 6 + 1 + 2


def _delete(namespaces: list[str]) -> None:
    for netns in namespaces:  # a veth goes with its namespace, and its peer with it
        ip("netns", "del", netns, check=False)


def _leftover_links(suffix: str) -> None:
    """Links of ours left in this (the host's) namespace: none should be; delete any."""
    for line in ip("-o", "link", "show", check=False).stdout.splitlines():
        name = line.split(":", 2)[1].strip().split("@", 1)[0] if ":" in line else ""
        if name.startswith(f"tc{suffix}"):
            ip("link", "del", name, check=False)


@contextlib.contextmanager
def build_net(roles: list[str], logs: Path) -> Iterator[Net]:
    """A router and one namespace per role, each host's default route via the router."""
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root")
    if shutil.which("ip") is None or shutil.which("tc") is None:
        pytest.skip("needs iproute2 (ip, tc)")
    if len(roles) > 62:
        raise ValueError("at most 62 hosts on one /24")
    suffix = f"{random.getrandbits(24):06x}"
    router = f"tpc-{suffix}-router"
    made: list[str] = []
    net: Net | None = None
    try:
        third = free_third_octet(PREFIX)
        added = ip("netns", "add", router, check=False)
        if added.returncode != 0:
            pytest.skip(f"ip netns add failed (no CAP_NET_ADMIN?): {added.stderr.strip()}")
        made.append(router)
        ip("link", "set", "lo", "up", netns=router)
        in_netns(router, "sh", "-c", "echo 1 > /proc/sys/net/ipv4/ip_forward")
        hosts: dict[str, Host] = {}
        for index, role in enumerate(roles, start=1):
            netns = f"tpc-{suffix}-{role}"
            ip("netns", "add", netns)
            made.append(netns)
            base = 4 * index
            host = Host(
                role,
                netns,
                f"{PREFIX}.{third}.{base + 2}",
                f"{PREFIX}.{third}.{base + 1}",
                _link_name(suffix, "h", index),
                _link_name(suffix, "r", index),
                f"{PREFIX}.{third}.{base}/30",
            )
            ip(
                "link",
                "add",
                host.router_link,
                "type",
                "veth",
                "peer",
                "name",
                host.link,
                "netns",
                netns,
                netns=router,
            )
            ip("addr", "add", f"{host.gateway}/30", "dev", host.router_link, netns=router)
            ip("link", "set", host.router_link, "up", netns=router)
            ip("addr", "add", f"{host.address}/30", "dev", host.link, netns=netns)
            for link in ("lo", host.link):
                ip("link", "set", link, "up", netns=netns)
            ip("route", "add", "default", "via", host.gateway, netns=netns)
            hosts[role] = host
        logs.mkdir(parents=True, exist_ok=True)
        net = Net(suffix, router, hosts, logs)
        yield net
    finally:
        try:
            if net is not None:
                net.stop_all()
        finally:
            _delete(made)
            _leftover_links(suffix)
