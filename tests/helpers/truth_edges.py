"""The tokens a count may differ by at the window's edges: the truth has when each token
left, a receive clock when it arrived, and a token sent in the window's last instant can
arrive after it (loopback delivery waits for its softirq on a busy machine), one sent just
before its start inside it."""

from __future__ import annotations

import json
from pathlib import Path

EDGE_NS = 5_000_000  # a token sent this close to a window edge may arrive across it


def sent_at_the_edges(truth_path: Path, window_wall_ns: list[int]) -> int:
    """The tokens the simulator sent within ``EDGE_NS`` of the window's start or end."""
    start, end = window_wall_ns
    count = 0
    for line in truth_path.read_text().splitlines():
        entry = json.loads(line)
        for sent in entry.get("send_ns") or []:
            count += abs(sent - start) <= EDGE_NS or abs(sent - end) <= EDGE_NS
    return count
