"""A TCP relay that delays what it forwards: netem's ``delay 50ms 20ms`` for kernels without
netem (tests/process/test_cluster_faults.py runs it in its own network namespace).

    python tests/helpers/tcp_relay.py LISTEN_HOST LISTEN_PORT TARGET_HOST TARGET_PORT
        [--delay-ms LOW HIGH] [--seed N]

Every connection accepted on LISTEN is forwarded to a new connection to TARGET, both ways.
Each chunk read is released at max(the previous release, its arrival + uniform(LOW, HIGH)
ms) in its direction: delayed, jittered, never reordered. Prints ``READY`` and the address
once listening; on SIGTERM prints one ``STATS`` line (JSON: connections, bytes and chunks
each way, the delays added) and exits 0.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import signal
import sys
from dataclasses import dataclass, field

READY = "tcp-relay listening on "
STATS = "tcp-relay stats "
CHUNK = 65536


@dataclass
class Stats:
    connections: int = 0
    failed_connects: int = 0
    bytes: dict[str, int] = field(default_factory=lambda: {"up": 0, "down": 0})
    chunks: dict[str, int] = field(default_factory=lambda: {"up": 0, "down": 0})
    delays_ms: list[float] = field(default_factory=list)  # release - arrival, per chunk

    def line(self) -> str:
        delays = self.delays_ms
        spread = {"min": min(delays), "max": max(delays), "mean": sum(delays) / len(delays)}
        return STATS + json.dumps(
            {
                "connections": self.connections,
                "failed_connects": self.failed_connects,
                "bytes": self.bytes,
                "chunks": self.chunks,
                "delay_ms": {k: round(v, 2) for k, v in spread.items()} if delays else None,
            }
        )


class Relay:
    def __init__(self, target: tuple[str, int], low_s: float, high_s: float, seed: int) -> None:
        self.target = target
        self.low_s, self.high_s = low_s, high_s
        self.random = random.Random(seed)
        self.stats = Stats()

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.wait_for(
                asyncio.open_connection(*self.target), timeout=10
            )
        except (OSError, TimeoutError) as error:  # the target not listening yet, say
            self.stats.failed_connects += 1
            print(f"tcp-relay: connect to the target failed: {error!r}", flush=True)
            writer.close()
            return
        self.stats.connections += 1
        pumps = [
            asyncio.create_task(self.pump(reader, up_writer, "up")),
            asyncio.create_task(self.pump(up_reader, writer, "down")),
        ]
        try:
            await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
        finally:  # one way ended (after its last chunk's release): the connection is over
            for task in pumps:
                task.cancel()
            await asyncio.gather(*pumps, return_exceptions=True)
            for end in (writer, up_writer):
                end.close()

    async def pump(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, way: str
    ) -> None:
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def release() -> None:
            while True:
                at, chunk = await queue.get()
                if (wait := at - loop.time()) > 0:
                    await asyncio.sleep(wait)
                if not chunk:
                    return
                writer.write(chunk)
                await writer.drain()

        releaser = asyncio.create_task(release())
        last = 0.0
        try:
            while True:
                try:
                    chunk = await reader.read(CHUNK)
                except OSError:
                    chunk = b""
                arrival = loop.time()
                last = max(last, arrival + self.random.uniform(self.low_s, self.high_s))
                queue.put_nowait((last, chunk))
                if not chunk:
                    break
                self.stats.bytes[way] += len(chunk)
                self.stats.chunks[way] += 1
                self.stats.delays_ms.append((last - arrival) * 1000)
            await releaser  # everything read is written before the connection ends
        except OSError:
            pass
        finally:
            releaser.cancel()


async def serve(args: argparse.Namespace) -> None:
    relay = Relay(
        (args.target_host, args.target_port),
        args.delay_ms[0] / 1000,
        args.delay_ms[1] / 1000,
        args.seed,
    )
    server = await asyncio.start_server(relay.handle, args.listen_host, args.listen_port)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    print(f"{READY}{args.listen_host}:{args.listen_port}", flush=True)
    await stop.wait()
    server.close()
    print(relay.stats.line(), flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("listen_host")
    parser.add_argument("listen_port", type=int)
    parser.add_argument("target_host")
    parser.add_argument("target_port", type=int)
    parser.add_argument("--delay-ms", type=float, nargs=2, default=(30.0, 70.0))
    parser.add_argument("--seed", type=int, default=None)
    asyncio.run(serve(parser.parse_args(argv)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
