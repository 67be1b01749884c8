"""A whole run against the least a reader can spend (issue 58, item 1): `tpot-locust run` as
installed beside a uvloop reader that parses nothing, reading the same server.

Usage: python benchmarks/whole_run.py [--streams 64,256,1024] [--gap-ms 2] [--tokens 200]
                                      [--seconds 10] [--rounds 2] [--clients raw,run]

Needs uvloop for the raw reader (`pip install uvloop`; not a dependency of the package).

For each stream count and round, each client in turn reads its own fresh simulator (gap mode,
``--gap-ms`` between tokens, answers of ``--tokens`` back to back, one token an event) on CPU
0, the client on the last CPU: ``raw``, a child process running a uvloop asyncio reader that
sends each stream's requests over keep-alive, stamps each read that brings ``data:`` lines
with ``time.perf_counter_ns`` and parses no JSON (the floor); ``run``, ``tpot-locust run`` of
a generated scenario (N closed-loop users, the embedded simulator: the supervisor, its Locust
process and its metrics sampler all count). Rounds alternate the clients.

Columns: token events per second the server sent in the token window (against N x 1000 /
gap: a client that cannot read what is sent holds the server back), the client's CPU
(user + system of its processes, read from /proc every 0.1 s) over the token window divided
by the server's token events in it (the window: the truth's first to last token, less a
second at each end), that over the raw reader's of the same round, and ITL p99 measured /
true: ``run``'s from its own truth check (its window, every gap); the raw reader's from its
per-read stamps against the truth of the same requests (a coarse floor, not a check).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
from output import Table, base_parser, ms, parse_list, print_header

from tpot_locust.cli.embedded_simulator import simulator_args
from tpot_locust.scenario.loader import load_scenario
from tpot_locust.sim.process import start_simulator
from tpot_locust.sim.truth import read_truth

CLIENT_CPUS = {sorted(os.sched_getaffinity(0))[-1]}
SERVER_CPUS = set(sorted(os.sched_getaffinity(0))[:-1]) or CLIENT_CPUS
TICKS_PER_S = os.sysconf("SC_CLK_TCK")
EDGE_NS = 1_000_000_000  # left out at each end of the token window: start-up and stop
SAMPLE_S = 0.1

RAW_READER = r"""
import asyncio, json, sys, time
import uvloop

host, port, streams, tokens, seconds = sys.argv[1], int(sys.argv[2]), *map(float, sys.argv[3:6])
streams, tokens = int(streams), int(tokens)

async def model_name():
    reader, writer = await asyncio.open_connection(host, port)
    writer.write(f"GET /v1/models HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
    data = await reader.read()
    writer.close()
    body = data.split(b"\r\n\r\n", 1)[1]  # chunked or not: the one JSON object in it
    return json.loads(body[body.index(b"{") : body.rindex(b"}") + 1])["data"][0]["id"]

async def stream(model, deadline, gaps, counts):
    body = json.dumps({"model": model, "stream": True, "max_tokens": tokens,
                       "min_tokens": tokens, "ignore_eos": True,
                       "messages": [{"role": "user", "content": "hello there"}]}).encode()
    request = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: {host}\r\n"
               f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
               ).encode() + body
    reader, writer = await asyncio.open_connection(host, port)
    while time.monotonic() < deadline:
        writer.write(request)
        last, tail, done = 0, b"", False
        while True:
            data = await reader.read(65536)
            if not data:
                return
            now = time.perf_counter_ns()
            # lines split across reads: seen in the joined bytes, not again in the tail
            joined = tail + data
            events = joined.count(b"\ndata: ") - tail.count(b"\ndata: ")
            if not done and b"\ndata: [DONE]" in joined:
                events -= 1
                done = True
            if events > 0:
                if last:
                    gaps.append(now - last)
                last = now
                counts[0] += events
            tail = joined[-16:]
            if done and tail.endswith(b"\r\n0\r\n\r\n"):
                break

async def main():
    model = await model_name()
    gaps, counts = [], [0]
    deadline = time.monotonic() + seconds
    await asyncio.gather(*(stream(model, deadline, gaps, counts) for _ in range(streams)))
    gaps.sort()
    p99 = gaps[min(len(gaps) - 1, int(0.99 * len(gaps)))] / 1e6 if gaps else float("nan")
    print(json.dumps({"events": counts[0], "read_gap_p99_ms": p99}))

uvloop.run(main())
"""


def _tree(root: int) -> list[int]:
    """``root`` and its descendants (from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            parent = int(stat.rsplit(")", 1)[1].split()[1])
            children.setdefault(parent, []).append(int(entry))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo += children.get(pid, [])
    return found


def _cpu_ticks(pid: int) -> int:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0
    return int(fields[11]) + int(fields[12])  # utime, stime


def _is_simulator(pid: int) -> bool:
    try:
        return b"tpot_locust.sim" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


class CpuSampler:
    """The client's CPU (its process tree, the simulator left out and moved off the
    client's core) every ``SAMPLE_S``, stamped with the wall clock."""

    def __init__(self, root: int) -> None:
        self.root = root
        self.samples: list[tuple[int, float]] = []
        self._stop = threading.Event()
        self._totals: dict[int, int] = {}  # a process that ended keeps its last count
        self._simulators: set[int] = set()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_S):
            for pid in _tree(self.root):
                if pid in self._simulators:
                    continue
                if _is_simulator(pid):  # moved off the client's core once, left out
                    self._simulators.add(pid)
                    try:
                        os.sched_setaffinity(pid, SERVER_CPUS)
                    except OSError:
                        pass
                    continue
                self._totals[pid] = max(self._totals.get(pid, 0), _cpu_ticks(pid))
            self.samples.append((time.time_ns(), sum(self._totals.values()) / TICKS_PER_S))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def cpu_s_between(self, start_ns: int, end_ns: int) -> float:
        stamps = np.array([s for s, _ in self.samples], dtype=np.float64)
        cpu = np.array([c for _, c in self.samples])
        return float(np.interp(end_ns, stamps, cpu) - np.interp(start_ns, stamps, cpu))


def token_window(truth: Path) -> tuple[int, int, int, np.ndarray]:
    """The window (ns, wall), the server's token events in it, and every true gap (ms)."""
    sends = [
        np.asarray(r["send_ns"], dtype=np.int64) for r in read_truth(truth) if r.get("send_ns")
    ]
    every = np.concatenate(sends)
    start, end = int(every.min()) + EDGE_NS, int(every.max()) - EDGE_NS
    inside = int(np.count_nonzero((every >= start) & (every <= end)))
    gaps = np.concatenate([np.diff(s) for s in sends if s.size > 1]) / 1e6
    return start, end, inside, gaps


def scenario_text(streams: int, tokens: int, gap_ms: float, seconds: float) -> str:
    return json.dumps(
        {
            "name": f"whole-run-{streams}",
            "duration": f"{seconds:g}s",
            "spawn_rate": streams,
            "seed": 1,
            "server": {"include_usage": True, "ignore_eos": True, "min_tokens": True},
            "classes": {"chat": {"users": streams, "prompt_tokens": 16, "output_tokens": tokens}},
            "simulator": {"ttft_ms": 5, "gap_ms": gap_ms},
        }
    )


def pin_client() -> None:
    os.sched_setaffinity(0, CLIENT_CPUS)


def run_raw(scenario_path: Path, folder: Path, streams: int, tokens: int, seconds: float) -> dict:
    truth = folder / "raw-truth.jsonl"
    args = simulator_args(load_scenario(scenario_path))
    with start_simulator(*args, truth=truth) as sim:
        os.sched_setaffinity(sim.process.pid, SERVER_CPUS)
        host, port = sim.url.split("//", 1)[1].rsplit(":", 1)
        command = [sys.executable, "-c", RAW_READER, host, port, str(streams), str(tokens)]
        client = subprocess.Popen(
            [*command, str(seconds)], stdout=subprocess.PIPE, text=True, preexec_fn=pin_client
        )
        sampler = CpuSampler(client.pid)
        out, _ = client.communicate(timeout=seconds + 120)
        sampler.stop()
        if client.returncode != 0:
            raise RuntimeError(f"the raw reader exited {client.returncode}")
    start, end, events, true_gaps = token_window(truth)
    measured = json.loads(out.strip().splitlines()[-1])
    return {
        "events_per_s": events / ((end - start) / 1e9),
        "us_per_event": 1e6 * sampler.cpu_s_between(start, end) / events,
        "itl_p99": (measured["read_gap_p99_ms"], float(np.percentile(true_gaps, 99))),
    }


def run_ours(scenario_path: Path, folder: Path, seconds: float) -> dict:
    out = folder / "run"
    command = [sys.executable, "-m", "tpot_locust", "run", str(scenario_path), "--out", str(out)]
    client = subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, preexec_fn=pin_client
    )
    sampler = CpuSampler(client.pid)
    _, errors = client.communicate(timeout=seconds + 180)
    sampler.stop()
    if client.returncode != 0:
        raise RuntimeError(f"tpot-locust run exited {client.returncode}: {errors[-2000:]}")
    start, end, events, _ = token_window(out / "truth.jsonl")
    itl = json.loads((out / "summary.json").read_text())["truth_check"]["metrics"]["itl"]["p99"]
    return {
        "events_per_s": events / ((end - start) / 1e9),
        "us_per_event": 1e6 * sampler.cpu_s_between(start, end) / events,
        "itl_p99": (itl["measured"], itl["true"]),
    }


def main() -> None:
    parser = base_parser(__doc__)
    parser.add_argument("--streams", default="64,256,1024")
    parser.add_argument("--gap-ms", type=float, default=2.0)
    parser.add_argument("--tokens", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--clients", default="raw,run")
    args = parser.parse_args()
    if args.quick:
        args.streams, args.seconds, args.rounds = "64", 5.0, 1
    clients = parse_list(args.clients, str)
    os.sched_setaffinity(0, SERVER_CPUS)  # this script beside the simulator, off the client's
    print_header(
        "whole run: tpot-locust run as installed against a uvloop reader that parses nothing",
        [
            f"gap {args.gap_ms:g} ms, answers of {args.tokens} tokens, {args.seconds:g} s a "
            f"case, {args.rounds} round(s) alternating {', '.join(clients)}",
            f"clients on CPU {sorted(CLIENT_CPUS)}, simulators and this script on "
            f"{sorted(SERVER_CPUS)}",
        ],
    )
    table = Table(
        ["streams", "round", "client", "events/s", "of sent", "us/ev", "x raw", "ITL p99 meas/true"]
    )
    for streams in parse_list(args.streams):
        sent_per_s = streams * 1000 / args.gap_ms
        for round_number in range(1, args.rounds + 1):
            order = clients if round_number % 2 else clients[::-1]
            results: dict[str, dict] = {}
            with tempfile.TemporaryDirectory(prefix="tpot-whole-run-") as tmp:
                folder = Path(tmp)
                scenario = folder / "scenario.yaml"
                scenario.write_text(scenario_text(streams, args.tokens, args.gap_ms, args.seconds))
                for client in order:
                    if client == "raw":
                        results[client] = run_raw(
                            scenario, folder, streams, args.tokens, args.seconds
                        )
                    else:
                        results[client] = run_ours(scenario, folder, args.seconds)
            raw = results.get("raw", {}).get("us_per_event")
            for client in clients:
                row = results[client]
                measured, true = row["itl_p99"]
                table.row(
                    streams,
                    round_number,
                    client,
                    f"{row['events_per_s']:,.0f}",
                    f"{row['events_per_s'] / sent_per_s:.2f}",
                    f"{row['us_per_event']:.1f}",
                    f"{row['us_per_event'] / raw:.2f}" if raw else "-",
                    f"{ms(measured)} / {ms(true)}",
                )


if __name__ == "__main__":
    main()
