"""The segment tap's kernel filter: which copies of which segments reach the tap at all.

Why its own room: the filter is a classic BPF program, run by the kernel for every packet
the host sends or receives, so what it lets through is what the tap pays for. It keeps the
IPv4 TCP segments (no fragments) that this host received from one of the servers' ports
(every token's arrival) and those it sent to one of them that carry data or open a
connection (each request's departure, ``SegmentTrack.sent``), cut to their headers: no byte
of a payload is ever copied (the tap sees every connection to those ports on the host, not
only ours), and the acknowledgements the client sends, one for about every segment it
receives, never reach it. The end watch's filter (``ends_filter``) is the tap's narrowed to
the segments that end a body.
"""

from __future__ import annotations

import _socket
import ctypes
import socket
import struct

ETH_P_IP = 0x0800
_SKF_AD_OFF, _SKF_AD_PROTOCOL, _SKF_AD_PKTTYPE = -0x1000 & 0xFFFFFFFF, 0, 4  # BPF extensions
PACKET_HOST, PACKET_OUTGOING = 0, 4  # a packet addressed to this host; one it sent
SO_ATTACH_FILTER = 26
_TCP_SYN = 0x02
_TCP_FIN_OR_RST = 0x05
# A chunked body's last chunk ("0\r\n\r\n", no trailers): a segment ending so ends a body
_LAST_CHUNK_WORD, _LAST_CHUNK_BYTE, _LAST_CHUNK_BYTES = 0x300D0A0D, 0x0A, 5

# Classic BPF instructions: (code, k), jumps (code, k, label if true, label if false)
_LDB_ABS, _LDH_ABS, _LDH_IND, _LDB_IND, _LDXB_MSH = 0x30, 0x28, 0x48, 0x50, 0xB1
_ST, _LD_MEM, _LDX_MEM = 0x02, 0x60, 0x61
_LD_IND = 0x40  # a 32-bit word at X + k
_JEQ, _JSET, _JGT_X, _JGE_X = 0x15, 0x45, 0x2D, 0x3D
_RSH, _LSH, _ADD_X, _SUB_K, _TAX = 0x74, 0x64, 0x0C, 0x14, 0x07
_RET_K, _RET_A = 0x06, 0x16
_DIRECTION, _HEADERS = 1, 0  # scratch memory: the packet's type; its headers' length

Instruction = tuple[int, int] | tuple[int, int, str | None, str | None]


def tap_filter(ports: list[int]) -> bytes:
    """The program for servers on ``ports`` (none: nothing passes)."""
    if not ports:
        return _assemble([(_RET_K, 0)])
    code: list[Instruction | str] = [
        (_LDB_ABS, _SKF_AD_OFF + _SKF_AD_PKTTYPE),
        (_ST, _DIRECTION),
        (_JEQ, PACKET_HOST, "ip", None),
        (_JEQ, PACKET_OUTGOING, "ip", "drop"),
        "ip",
        *_IPV4_TCP,
        (_LD_MEM, _DIRECTION),
        (_JEQ, PACKET_HOST, None, "sent"),
        (_LDH_IND, 0),  # received: the source port is a server's
        *((_JEQ, port, "keep", None) for port in ports),
        (_RET_K, 0),
        "sent",
        (_LDH_IND, 2),  # sent: the destination port is a server's
        *((_JEQ, port, "sent to a server", None) for port in ports),
        (_RET_K, 0),
        "sent to a server",
        (_LDB_IND, 13),  # the TCP flags: a SYN opens the connection (our first sequence)
        (_JSET, _TCP_SYN, "keep", None),
        *_HEADERS_LENGTH,
        (_ST, _HEADERS),
        (_LDX_MEM, _HEADERS),
        (_LDH_ABS, 2),  # the IP total length: above the headers' when it carries data
        (_JGT_X, 0, "keep", "drop"),
        *_DROP_OR_KEEP_HEADERS,
    ]
    return _assemble(code)


def ends_filter(ports: list[int]) -> bytes:
    """The program that lets through only segments from servers on ``ports`` that end a
    body or a connection: a FIN or a reset, or data whose last bytes are a chunked body's
    last chunk (``end_watch``). The payload is looked at in the kernel, never copied: what
    passes is cut to its headers, as the tap's copies are. (A chunk whose own data ended
    in ``0\r\n`` passes too: that body is then read at once, which costs a little CPU.)"""
    if not ports:
        return _assemble([(_RET_K, 0)])
    code: list[Instruction | str] = [
        (_LDB_ABS, _SKF_AD_OFF + _SKF_AD_PKTTYPE),
        (_JEQ, PACKET_HOST, None, "drop"),
        *_IPV4_TCP,
        (_LDH_IND, 0),  # the source port is a server's
        *((_JEQ, port, "from a server", None) for port in ports),
        (_RET_K, 0),
        "from a server",
        (_LDB_IND, 13),  # the TCP flags
        (_JSET, _TCP_FIN_OR_RST, "keep", None),
        *_HEADERS_LENGTH,
        (_ST, _HEADERS),
        (_LDH_ABS, 2),  # the IP total length, less the last chunk's: where it would begin
        (_SUB_K, _LAST_CHUNK_BYTES),
        (_LDX_MEM, _HEADERS),
        (_JGE_X, 0, None, "drop"),  # the data is shorter than a last chunk
        (_TAX, 0),
        (_LD_IND, 0),
        (_JEQ, _LAST_CHUNK_WORD, None, "drop"),
        (_LDB_IND, 4),
        (_JEQ, _LAST_CHUNK_BYTE, "keep", "drop"),
        *_DROP_OR_KEEP_HEADERS,
    ]
    return _assemble(code)


_HEADERS_LENGTH: list[Instruction] = [
    (_LDB_IND, 12),  # the TCP data offset, in its high 4 bits
    (_RSH, 4),
    (_LSH, 2),  # the TCP header's length
    (_ADD_X, 0),  # and the IP header's (X)
]
# An IPv4 TCP segment, not a fragment (else to "drop"); then X is the IP header's length
_IPV4_TCP: list[Instruction] = [
    (_LDH_ABS, _SKF_AD_OFF + _SKF_AD_PROTOCOL),
    (_JEQ, ETH_P_IP, None, "drop"),
    (_LDB_ABS, 9),  # the IP protocol
    (_JEQ, 6, None, "drop"),  # TCP
    (_LDH_ABS, 6),  # flags and fragment offset
    (_JSET, 0x1FFF, "drop", None),  # a fragment
    (_LDXB_MSH, 0),  # X: the IP header's length
]
_DROP_OR_KEEP_HEADERS: list[Instruction | str] = [
    "drop",
    (_RET_K, 0),
    "keep",
    (_LDXB_MSH, 0),
    *_HEADERS_LENGTH,
    (_RET_A, 0),  # the IP and TCP headers, not a byte of what the segment carries
]


def _assemble(code: list[Instruction | str]) -> bytes:
    """Labels (strings) resolved to the forward jumps the kernel counts (instructions
    skipped); None: the next instruction."""
    labels, index = {}, 0
    for item in code:
        if isinstance(item, str):
            labels[item] = index
        else:
            index += 1
    program, index = [], 0
    for item in code:
        if isinstance(item, str):
            continue
        index += 1
        if len(item) == 2:
            program.append(struct.pack("HBBI", item[0], 0, 0, item[1]))
            continue
        jumps = [0 if label is None else labels[label] - index for label in item[2:]]
        assert all(0 <= jump < 256 for jump in jumps), jumps  # ok: forward, 8 bits
        program.append(struct.pack("HBBI", item[0], *jumps, item[1]))
    return b"".join(program)


def attach(sock: _socket.socket, program: bytes) -> None:
    """Replace the socket's filter (the kernel copies the program during the call)."""
    buffer = ctypes.create_string_buffer(program, len(program))
    fprog = struct.pack("HP", len(program) // 8, ctypes.addressof(buffer))
    sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, fprog)
