"""The ``network`` cause (issue 26) against a real lossy network: a simulator in a network
namespace, two hops away, behind a router namespace that drops a share of the server's
segments on their way to this (the host's) namespace.

    host (client) --veth-- router (drops 10 % of what it forwards to the host) --veth-- server

The drops are made by a router, not by the server's own interface: a qdisc on the sending
host that refuses a packet tells that host's TCP at once (no loss, no retransmission), and
netem (which hides its drops from the sender) is not built into every kernel; so netem's
``loss`` is used on the router when the kernel has it, else an HTB class picked by a classic
BPF filter drawing a random number (``SKF_AD_RANDOM``) whose queue holds nothing.

- unit level: ``stream_request`` over that link sees retransmissions (``timings.retransmits``)
  in some request, and over loopback in none; ``total_retrans`` of a connected socket is an
  int, of no socket None;
- end to end: ``tpot-locust run --host`` against that simulator tags tail gaps ``network``,
  counts ``retransmitting_requests`` and gives ``network`` a share of the ITL P99.

Needs root (``ip netns``); skipped, saying why, where namespaces or the drop cannot be made.
Every namespace and link made here is deleted afterwards, whatever happened.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import socket
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT, run_command
from tests.helpers.netns import drop_share, free_third_octet, in_netns, ip, start_simulator_in_netns
from tpot_locust.common.clock import stamp_ns
from tpot_locust.sim.process import SimProcess, start_simulator
from tpot_locust.wire.http_client import HTTPConnection, Origin
from tpot_locust.wire.streaming import StreamRequest, stream_request
from tpot_locust.wire.tcp_info import retransmissions

LOSS_PERCENT = 10
GAP_MS = 5
TOKENS = 100
LOSSY_REQUESTS = 6  # ~6 x 100 segments of the server's: dozens lost at 10 %
SIM_ARGS = ("--gap-ms", str(GAP_MS), "--ttft-ms", "20")
SCENARIO = ROOT / "tests/scenarios/network_loss.yaml"


@dataclass(frozen=True)
class LossyLink:
    server_netns: str
    server_address: str
    drop: str  # how the router drops


def _cleanup(namespaces: list[str], host_link: str) -> None:
    for netns in namespaces:  # a veth goes with its namespace, and its peer with it
        ip("netns", "del", netns, check=False)
    if ip("link", "show", host_link, check=False).returncode == 0:
        ip("link", "del", host_link, check=False)


@pytest.fixture(scope="module")
def lossy_link() -> Iterator[LossyLink]:
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root")
    if shutil.which("ip") is None or shutil.which("tc") is None:
        pytest.skip("needs iproute2 (ip, tc)")
    suffix = f"{random.getrandbits(24):06x}"
    router, server = f"tpot-net-{suffix}-r", f"tpot-net-{suffix}-s"
    host_link, router_out, router_in, server_link = (
        f"tl{suffix}h",
        f"tl{suffix}a",
        f"tl{suffix}b",
        f"tl{suffix}s",
    )
    made: list[str] = []
    try:
        third = free_third_octet("10.251")
        net = f"10.251.{third}"
        added = ip("netns", "add", router, check=False)
        if added.returncode != 0:
            pytest.skip(f"ip netns add failed (no CAP_NET_ADMIN?): {added.stderr.strip()}")
        made.append(router)
        ip("netns", "add", server)
        made.append(server)
        ip("link", "add", host_link, "type", "veth", "peer", "name", router_out)
        ip("link", "set", router_out, "netns", router)
        ip("link", "add", router_in, "type", "veth", "peer", "name", server_link, netns=router)
        ip("link", "set", server_link, "netns", server, netns=router)
        ip("addr", "add", f"{net}.1/30", "dev", host_link)
        ip("link", "set", host_link, "up")
        ip("route", "add", f"{net}.4/30", "via", f"{net}.2")
        ip("addr", "add", f"{net}.2/30", "dev", router_out, netns=router)
        ip("addr", "add", f"{net}.5/30", "dev", router_in, netns=router)
        for link in ("lo", router_out, router_in):
            ip("link", "set", link, "up", netns=router)
        in_netns(router, "sh", "-c", "echo 1 > /proc/sys/net/ipv4/ip_forward")
        ip("addr", "add", f"{net}.6/30", "dev", server_link, netns=server)
        for link in ("lo", server_link):
            ip("link", "set", link, "up", netns=server)
        ip("route", "add", "default", "via", f"{net}.5", netns=server)
        drop = drop_share(router, router_out, LOSS_PERCENT)  # the server's data, to us
        if drop is None:
            pytest.skip("this kernel has neither netem nor HTB + cls_bpf to drop packets with")
        yield LossyLink(server, f"{net}.6", drop)
    finally:
        _cleanup(made, host_link)


@pytest.fixture(scope="module")
def lossy_simulator(lossy_link: LossyLink) -> Iterator[SimProcess]:
    simulator = start_simulator_in_netns(
        lossy_link.server_netns, *SIM_ARGS, host=lossy_link.server_address
    )
    try:
        yield simulator
    finally:
        simulator.stop()  # before the namespaces go: the teardown of lossy_link comes after


def _server_retransmissions(netns: str) -> int:
    """Segments the server's namespace retransmitted (``/proc/net/snmp`` RetransSegs)."""
    snmp = in_netns(netns, "cat", "/proc/net/snmp").stdout
    rows = [line.split() for line in snmp.splitlines()]
    names, values = (row for row in rows if row[0] == "Tcp:")
    return int(values[names.index("RetransSegs")])


def _chat_request(request_id: str, tokens: int) -> StreamRequest:
    body = {
        "model": "tpot-sim",
        "stream": True,
        "max_tokens": tokens,
        "min_tokens": tokens,
        "ignore_eos": True,
        "stream_options": {"include_usage": True},
        "messages": [{"role": "user", "content": "hello " * 16}],
    }
    return StreamRequest(
        user_class="net",
        api="chat",
        request_id=request_id,
        path="/v1/chat/completions",
        headers={"Content-Type": "application/json", "X-Request-Id": request_id},
        body=json.dumps(body).encode(),
        prompt_tokens_requested=16,
        first_token_timeout=30,
        idle_timeout=30,
        total_timeout=60,
        t_intended_ns=stamp_ns(),
    )


def _stream(url: str, count: int, tokens: int) -> list[tuple[int, float]]:
    """``count`` requests on one keep-alive connection: each one's retransmissions and its
    worst gap (ms)."""
    connection = HTTPConnection(Origin.parse(url))
    seen = []
    try:
        for index in range(count):
            timings, _ = stream_request(connection, _chat_request(f"net-{index}", tokens))
            assert timings.ok, f"request {index}: {timings.error_category} {timings.error}"
            stamps = timings.token_stamps
            gaps = [later - earlier for earlier, later in zip(stamps, stamps[1:], strict=False)]
            worst = max(gaps, default=0) / 1e6
            seen.append((timings.retransmits, round(worst, 1)))
    finally:
        connection.close()
    return seen


def test_retransmissions_of_a_socket() -> None:
    assert retransmissions(None) is None
    with start_simulator(*SIM_ARGS) as simulator:
        with socket.create_connection((simulator.host, simulator.port), 5) as sock:
            count = retransmissions(sock)
    if sys.platform.startswith("linux"):
        assert isinstance(count, int) and count == 0
    else:
        assert count is None


def test_retransmissions_seen_on_a_lossy_link_and_not_on_loopback(
    lossy_link: LossyLink, lossy_simulator: SimProcess
) -> None:
    with start_simulator(*SIM_ARGS) as loopback:
        clean = _stream(loopback.url, 3, 50)
    assert all(retransmits == 0 for retransmits, _ in clean), clean

    before = _server_retransmissions(lossy_link.server_netns)
    lossy = _stream(lossy_simulator.url, LOSSY_REQUESTS, TOKENS)
    server_retransmitted = _server_retransmissions(lossy_link.server_netns) - before
    # the link is lossy (else nothing here is tested): the server had to send again
    assert server_retransmitted > 0, f"{lossy_link.drop}: the server retransmitted nothing"
    assert any(retransmits > 0 for retransmits, _ in lossy), (
        f"{lossy_link.drop}: the server retransmitted {server_retransmitted} segments to us, "
        f"yet no request saw a retransmission; (retransmits, worst gap ms) per request: {lossy}"
    )


def test_run_tags_gaps_network(
    lossy_link: LossyLink, lossy_simulator: SimProcess, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    before = _server_retransmissions(lossy_link.server_netns)
    result = run_command(
        [
            sys.executable,
            "-m",
            "tpot_locust",
            "run",
            str(SCENARIO),
            "--host",
            lossy_simulator.url,
            "--out",
            str(out),
        ],
        timeout=90,
    )
    server_retransmitted = _server_retransmissions(lossy_link.server_netns) - before
    output = result.stdout[-3000:] + result.stderr[-3000:]
    assert result.returncode == 0, output
    assert server_retransmitted > 0, f"{lossy_link.drop}: the server retransmitted nothing"
    summary = json.loads((out / "summary.json").read_text())
    saved: dict[str, Any] = json.loads((out / "histograms.json").read_text())
    counters = saved["classes"]["chat"]["counters"]
    attribution = summary["attribution"]
    shares = attribution["itl"]["p99"]["shares"]
    seen = (
        f"{lossy_link.drop}, server retransmitted {server_retransmitted}; ok "
        f"{counters.get('ok')}, retransmitting {counters.get('retransmitting_requests')}; "
        f"ITL p99 shares {shares}"
    )
    assert counters.get("retransmitting_requests", 0) > 0, seen
    assert any("network" in gap["causes"] for gap in attribution["tail_gaps"]), seen
    assert (shares.get("network") or 0) > 0, seen
