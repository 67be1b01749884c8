"""Network namespaces for the tests that need a real network: ``ip`` and ``tc`` wrappers, and
a random share of packets dropped with what the kernel has.

The drops are made by a router, on packets it forwards: a qdisc on the sending host that
refuses a packet tells that host's TCP at once (no loss, no retransmission). netem's ``loss``
is used when the kernel has it, else an HTB class picked by a classic BPF filter drawing a
random number (``SKF_AD_RANDOM``) whose queue holds nothing. A filter can also pick only the
packets of some TCP ports (then BPF alone: netem cannot choose).

``start_simulator_in_netns`` runs the simulator in a namespace (``ip netns exec`` execs it,
so ``SimProcess.stop``'s SIGTERM reaches it).

Needs root; callers skip, saying why, where namespaces or drops cannot be made.
"""

from __future__ import annotations

import os
import queue
import random
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tpot_locust.common.child_process import child_options
from tpot_locust.sim.cli import READY_PREFIX
from tpot_locust.sim.process import SimProcess

__all__ = [
    "drop_share",
    "environment",
    "free_third_octet",
    "in_netns",
    "ip",
    "start_simulator_in_netns",
    "stop_drops",
]

# classic BPF: A = random u32; A >= threshold ? -1 (the filter's class: dropped) : 0 (no match)
_SKF_AD_RANDOM = 0xFFFFF000 + 56
_BPF_LD_W_ABS, _BPF_JGE_K, _BPF_RET_K = 0x20, 0x35, 0x06
_BPF_LD_B_ABS, _BPF_LD_H_IND, _BPF_LDX_B_MSH, _BPF_JEQ_K = 0x30, 0x48, 0xB1, 0x15
_ETHERNET = 14  # cls_bpf sees a packet from its link-layer header, ingress and egress alike
_TCP = 6


def ip(*args: str, netns: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    command = ["ip", *(("-n", netns) if netns else ()), *args]
    result = subprocess.run(command, capture_output=True, text=True, timeout=10)
    if check and result.returncode != 0:
        raise RuntimeError(f"{' '.join(command)}: {result.stderr.strip()}")
    return result


def in_netns(netns: str, *command: str, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run(
        ["ip", "netns", "exec", netns, *command], capture_output=True, text=True, timeout=10
    )
    if check and result.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} in {netns}: {result.stderr.strip()}")
    return result


def _bpf_program(percent: float, ports: tuple[int, ...]) -> str:
    """``tc``'s ``bytecode`` text: ``percent`` % of the IPv4 packets (of TCP segments from or
    to one of ``ports`` when given) go to the dropping class."""
    threshold = min(int((1 - percent / 100) * 2**32), 2**32 - 1) if percent < 100 else 0
    draw = [
        (_BPF_LD_W_ABS, 0, 0, _SKF_AD_RANDOM),
        (_BPF_JGE_K, 0, 1, threshold),
        (_BPF_RET_K, 0, 0, 0xFFFFFFFF),
        (_BPF_RET_K, 0, 0, 0),
    ]
    program: list[tuple[int, int, int, int]] = []
    if ports:
        # not TCP: no match; X = the IP header's length; the source port (ldh [x + 14]),
        # then the destination port (ldh [x + 16]), each compared with every port: a match
        # jumps to the draw; none reaches "no match". A jump goes to its pc + 1 + offset.
        n = len(ports)
        no_match, draw_at = 5 + 2 * n, 6 + 2 * n
        program += [
            (_BPF_LD_B_ABS, 0, 0, _ETHERNET + 9),
            (_BPF_JEQ_K, 0, no_match - 2, _TCP),
            (_BPF_LDX_B_MSH, 0, 0, _ETHERNET),
        ]
        for offset in (0, 2):
            program.append((_BPF_LD_H_IND, 0, 0, _ETHERNET + offset))
            program += [
                (_BPF_JEQ_K, draw_at - (len(program) + i) - 1, 0, port)
                for i, port in enumerate(ports)
            ]
        program.append((_BPF_RET_K, 0, 0, 0))
        assert len(program) == draw_at
    program += draw
    return ",".join([str(len(program)), *(" ".join(map(str, op)) for op in program)])


def drop_share(netns: str, device: str, percent: float, ports: tuple[int, ...] = ()) -> str | None:
    """Drop ``percent`` % of what ``device`` sends (in ``netns``); with ``ports``, only TCP
    segments from or to one of them. How, or None if this kernel has no way."""
    tc = ("tc", "qdisc", "add", "dev", device, "root")
    if not ports:
        loss = in_netns(netns, *tc, "netem", "loss", f"{percent}%", check=False)
        if loss.returncode == 0:
            return f"netem loss {percent}%"
    steps = [
        [*tc, "handle", "1:", "htb", "default", "1"],
        [
            "tc",
            "class",
            "add",
            "dev",
            device,
            "parent",
            "1:",
            "classid",
            "1:1",
            "htb",
            "rate",
            "10gbit",
        ],
        [
            "tc",
            "class",
            "add",
            "dev",
            device,
            "parent",
            "1:",
            "classid",
            "1:2",
            "htb",
            "rate",
            "10gbit",
        ],
        ["tc", "qdisc", "add", "dev", device, "parent", "1:2", "pfifo", "limit", "0"],
        [
            "tc",
            "filter",
            "add",
            "dev",
            device,
            "parent",
            "1:",
            "protocol",
            "ip",
            "prio",
            "1",
            "bpf",
            "bytecode",
            _bpf_program(percent, ports),
            "classid",
            "1:2",
        ],
    ]
    for step in steps:
        if in_netns(netns, *step, check=False).returncode != 0:
            stop_drops(netns, device)
            return None
    which = f" of TCP ports {', '.join(map(str, ports))}" if ports else ""
    return f"htb + bpf random drop {percent}%{which}"


def stop_drops(netns: str, device: str) -> None:
    """Whatever ``drop_share`` put on ``device``, gone."""
    in_netns(netns, "tc", "qdisc", "del", "dev", device, "root", check=False)


def free_third_octet(prefix: str) -> int:
    """A third octet ``x`` such that no address or route of this host is in ``prefix.x.0/24``
    (``prefix``: the first two octets, e.g. ``"10.251"``); skips the test if none is free."""
    used = ip("-4", "-o", "addr").stdout + ip("-4", "route").stdout
    for third in random.sample(range(256), 256):
        if f"{prefix}.{third}." not in used:
            return third
    pytest.skip(f"no free {prefix}.x.0/24 for the test's links")


def environment(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ, PYTHONUNBUFFERED="1", **(extra or {}))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    return env


def _lines_of(process: subprocess.Popen[str]) -> tuple[queue.Queue[str | None], threading.Thread]:
    """A queue of the process's stdout lines (None at its end), and the thread reading
    them (which keeps the pipe from filling for the process's life)."""
    lines: queue.Queue[str | None] = queue.Queue()

    def drain() -> None:
        for line in process.stdout:  # type: ignore[union-attr]
            lines.put(line)
        lines.put(None)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    return lines, reader


def start_simulator_in_netns(
    netns: str,
    *args: str,
    host: str,
    port: int = 0,
    url_host: str | None = None,
    truth: Path | None = None,
    timeout_s: float = 20,
) -> SimProcess:
    """``python -m tpot_locust sim --host HOST --port PORT [--truth FILE] ARGS`` in ``netns``,
    once it said it listens (its ``url`` names ``url_host`` when given: a server bound to
    0.0.0.0 is reached by one of its addresses). ``SimProcess.stop`` stops it."""
    command = [
        "ip",
        "netns",
        "exec",
        netns,
        sys.executable,
        "-m",
        "tpot_locust",
        "sim",
        "--host",
        host,
        "--port",
        str(port),
        *(("--truth", str(truth)) if truth is not None else ()),
        *args,
    ]
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, text=True, env=environment(), cwd=ROOT, **child_options()
    )
    lines, reader = _lines_of(process)
    simulator = SimProcess(process, "", truth, reader)
    try:
        deadline = time.monotonic() + timeout_s
        while (line := lines.get(timeout=max(0.1, deadline - time.monotonic()))) is not None:
            if line.startswith(READY_PREFIX):
                url = line[len(READY_PREFIX) :].strip()
                if url_host is not None:
                    url = f"{url.split('://', 1)[0]}://{url_host}:{url.rsplit(':', 1)[1]}"
                simulator.url = url
                return simulator
        raise RuntimeError(f"simulator in {netns} exited with {process.wait()}")
    except queue.Empty:
        simulator.stop()
        raise RuntimeError(f"simulator in {netns} not ready within {timeout_s} s") from None
    except BaseException:
        simulator.stop()
        raise
