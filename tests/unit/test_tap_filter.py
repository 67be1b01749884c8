"""The segment tap's kernel filter, run here by a small classic-BPF interpreter on packets
built by hand: which copies pass (their headers only) and which never reach the tap."""

from __future__ import annotations

import struct

from tpot_locust.wire.tap_filter import PACKET_HOST, PACKET_OUTGOING, tap_filter

SERVER, CLIENT, OTHER = 8000, 40000, 9999
SYN, ACK, PSH = 0x02, 0x10, 0x08


def packet(
    source: int,
    destination: int,
    payload: int,
    flags: int = ACK | PSH,
    fragment: int = 0,
    options: bytes = b"",
) -> bytes:
    """An IPv4 TCP packet (addresses 127.0.0.1) with ``payload`` bytes of data."""
    ip_header = 20 + len(options)
    total = ip_header + 20 + payload
    ip = (
        struct.pack(
            "!BBHHHBBH4s4s",
            0x40 | ip_header // 4,
            0,
            total,
            0,
            fragment,
            64,
            6,
            0,
            bytes([127, 0, 0, 1]),
            bytes([127, 0, 0, 1]),
        )
        + options
    )
    tcp = struct.pack("!HHIIBBHHH", source, destination, 1, 1, 0x50, flags, 512, 0, 0)
    return ip + tcp + b"x" * payload


def run(program: bytes, data: bytes, kind: int, protocol: int = 0x0800) -> int:
    """What the kernel would keep of ``data`` (bytes; 0: dropped), for a packet of type
    ``kind``: the instructions the filter uses, interpreted."""
    code = [struct.unpack("HBBI", program[at : at + 8]) for at in range(0, len(program), 8)]
    a = x = 0
    memory = [0] * 16
    pc = 0
    while True:
        op, jt, jf, k = code[pc]
        pc += 1
        if op in (0x30, 0x28):  # ld b/h absolute, or an extension
            if k >= 0x80000000:
                a = {0xFFFFF000: protocol, 0xFFFFF004: kind}[k]
            else:
                size = 1 if op == 0x30 else 2
                a = int.from_bytes(data[k : k + size], "big")
        elif op in (0x50, 0x48):  # ld b/h [x + k]
            size = 1 if op == 0x50 else 2
            a = int.from_bytes(data[x + k : x + k + size], "big")
        elif op == 0xB1:  # ldx 4 * ([k] & 0xf)
            x = 4 * (data[k] & 0xF)
        elif op == 0x02:
            memory[k] = a
        elif op == 0x60:
            a = memory[k]
        elif op == 0x61:
            x = memory[k]
        elif op == 0x74:
            a >>= k
        elif op == 0x64:
            a = (a << k) & 0xFFFFFFFF
        elif op == 0x0C:
            a = (a + x) & 0xFFFFFFFF
        elif op == 0x15:
            pc += jt if a == k else jf
        elif op == 0x45:
            pc += jt if a & k else jf
        elif op == 0x2D:
            pc += jt if a > x else jf
        elif op == 0x06:
            return k
        elif op == 0x16:
            return a
        else:
            raise AssertionError(f"an instruction the interpreter lacks: {op:#x}")


def test_nothing_passes_without_a_server() -> None:
    assert run(tap_filter([]), packet(SERVER, CLIENT, 100), PACKET_HOST) == 0


def test_a_servers_segments_pass_cut_to_their_headers() -> None:
    program = tap_filter([SERVER, 8001])
    assert run(program, packet(SERVER, CLIENT, 100), PACKET_HOST) == 40
    assert run(program, packet(8001, CLIENT, 0, flags=SYN | ACK), PACKET_HOST) == 40
    options = bytes([1, 1, 1, 0])
    assert run(program, packet(SERVER, CLIENT, 100, options=options), PACKET_HOST) == 44
    assert run(program, packet(OTHER, CLIENT, 100), PACKET_HOST) == 0  # another port
    assert run(program, packet(SERVER, CLIENT, 100, fragment=0x2001), PACKET_HOST) == 0
    assert run(program, packet(SERVER, CLIENT, 100), PACKET_HOST, protocol=0x86DD) == 0
    assert run(program, packet(SERVER, CLIENT, 100), 3) == 0  # another host's: PACKET_OTHERHOST


def test_what_we_send_a_server_passes_when_it_opens_or_carries_data() -> None:
    program = tap_filter([SERVER])
    assert run(program, packet(CLIENT, SERVER, 300), PACKET_OUTGOING) == 40  # a request
    assert run(program, packet(CLIENT, SERVER, 0, flags=SYN), PACKET_OUTGOING) == 40
    assert run(program, packet(CLIENT, SERVER, 0), PACKET_OUTGOING) == 0  # an ACK: most
    assert run(program, packet(CLIENT, OTHER, 300), PACKET_OUTGOING) == 0
    assert run(program, packet(SERVER, CLIENT, 300), PACKET_OUTGOING) == 0  # a server's own
