"""Soak: steady load with faults mixed in, for minutes; memory over time, errors vs faults.

Usage: python benchmarks/soak.py [--minutes 10] [--users 20] [--workers 2]
                                 [--fault-rate 0.01] [--sample-s 30] [--out DIR]

Starts ``tests/helpers/fault_server.py`` (its own process) injecting a random fault of
``RATE_FAULTS`` into ``--fault-rate`` of the requests, and Locust (a master and
``--workers`` worker processes, or one process with ``--workers 0``) running this file's
``SoakUser`` against it. Every ``--sample-s`` it prints the RSS of the server, the master
and each worker. At the end it prints, per error category, the faults the server injected
against the failures the client counted (``summary.json``), and the RSS growth of each
Locust process from the first sample after warm-up (10 % of the run, at least 30 s) to
the last. Exit code 0 when the counts match and every process stayed within 10 %, else 1.

Locust stops users gracefully (``--stop-timeout``), so no request is cut off at the end
and the counts can match exactly. Not run in CI.
"""

from __future__ import annotations

import os

if __name__ != "__main__":  # imported by Locust as the locustfile
    from locust import constant

    import tpot_locust.plugin  # noqa: F401  (records and reports our metrics)
    from tpot_locust import ChatUser

    class SoakUser(ChatUser):
        model = "fault-model"
        prompt_tokens = 64
        output_tokens = int(os.environ.get("SOAK_OUTPUT_TOKENS", "64"))
        turns = 1
        think_time = 0.001
        wait_time = constant(float(os.environ.get("SOAK_WAIT_S", "0")))
        first_token_timeout = 1.0  # the server's stalls last 2 s
        idle_timeout = 1.0
        total_timeout = 30.0


import argparse  # noqa: E402
import json  # noqa: E402
import socket  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import urllib.request  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
STOP_TIMEOUT_S = 20
RSS_TOLERANCE = 0.10


def rss_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def server_stats(url: str) -> dict:
    with urllib.request.urlopen(url + "/stats", timeout=10) as response:
        return json.loads(response.read())


def start_server(args: argparse.Namespace) -> tuple[subprocess.Popen[str], str]:
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.helpers.fault_server",
            "--fault-rate",
            str(args.fault_rate),
            "--gap-ms",
            str(args.gap_ms),
            "--stall-s",
            "2",
            "--seed",
            str(args.seed),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    line = server.stdout.readline() if server.stdout else ""
    if "listening on" not in line:
        server.kill()
        raise SystemExit(f"soak: the fault server did not start: {line!r}")
    return server, line.rsplit(" ", 1)[1].strip()


def locust_processes(args: argparse.Namespace, url: str, out: Path) -> list[subprocess.Popen]:
    env = dict(os.environ, SOAK_OUTPUT_TOKENS=str(args.output_tokens), PYTHONUNBUFFERED="1")
    base = [sys.executable, "-m", "locust", "-f", str(Path(__file__).resolve())]
    master = [
        *base,
        "--headless",
        "-u",
        str(args.users),
        "-r",
        str(args.users),
        "-t",
        f"{args.minutes * 60:.0f}s",
        "--host",
        url,
        "--tpot-out",
        str(out),
        "--csv",
        str(out / "locust"),
        "--only-summary",
        "--stop-timeout",
        str(STOP_TIMEOUT_S),
    ]
    log = open(out / "locust.log", "w")  # noqa: SIM115 - closed with the processes
    if not args.workers:
        return [subprocess.Popen(master, cwd=ROOT, env=env, stdout=log, stderr=log)]
    port = free_port()
    master += [
        "--master",
        "--expect-workers",
        str(args.workers),
        "--master-bind-host",
        "127.0.0.1",
        "--master-bind-port",
        str(port),
    ]
    worker = [*base, "--worker", "--master-host", "127.0.0.1", "--master-port", str(port)]
    processes = [subprocess.Popen(master, cwd=ROOT, env=env, stdout=log, stderr=log)]
    processes += [
        subprocess.Popen(worker, cwd=ROOT, env=env, stdout=log, stderr=log)
        for _ in range(args.workers)
    ]
    return processes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--users", type=int, default=20)
    parser.add_argument("--workers", type=int, default=2, help="0: one Locust process")
    parser.add_argument("--fault-rate", type=float, default=0.01)
    parser.add_argument("--output-tokens", type=int, default=64)
    parser.add_argument("--gap-ms", type=float, default=5.0, help="server's gap per token")
    parser.add_argument("--sample-s", type=float, default=30.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    out = args.out or ROOT / "results" / f"soak-{time.strftime('%Y%m%d-%H%M%S')}"
    out.mkdir(parents=True, exist_ok=True)

    server, url = start_server(args)
    processes: list[subprocess.Popen] = []
    try:
        processes = locust_processes(args, url, out)
        names = ["master"] + [f"worker{i + 1}" for i in range(len(processes) - 1)]
        if not args.workers:
            names = ["locust"]
        print(
            f"soak: {args.minutes:g} min, {args.users} users, {args.workers} workers, "
            f"faults {args.fault_rate:.1%} -> {url}; results in {out}",
            flush=True,
        )
        header = f"{'time':>7} {'requests':>9} {'server MB':>10}" + "".join(
            f"{name + ' MB':>12}" for name in names
        )
        print(header, flush=True)
        samples: list[tuple[float, list[float | None]]] = []
        started = time.monotonic()
        while processes[0].poll() is None:
            time.sleep(min(args.sample_s, 1.0))
            elapsed = time.monotonic() - started
            if samples and elapsed - samples[-1][0] < args.sample_s:
                continue
            rss = [rss_mb(p.pid) for p in processes]
            try:
                requests = sum(server_stats(url)["requests"].values())
            except OSError:
                requests = -1
            samples.append((elapsed, rss))
            cells = "".join(f"{value:12.1f}" if value else f"{'-':>12}" for value in rss)
            minutes, seconds = divmod(int(elapsed), 60)
            print(
                f"{minutes:4d}:{seconds:02d} {requests:9,} {rss_mb(server.pid) or 0:10.1f}{cells}",
                flush=True,
            )
        for process in processes[1:]:
            process.wait(timeout=60)
        stats = server_stats(url)
    finally:
        for process in [*processes, server]:
            if process.poll() is None:
                process.terminate()
                try:
                    process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    process.kill()
    return report(out, stats, samples, names, args, processes[0].returncode)


def report(
    out: Path, stats: dict, samples: list, names: list[str], args: argparse.Namespace, code: int
) -> int:
    print(f"\nLocust exit code {code} (1: requests failed, as the faults intend)")
    try:
        summary = json.loads((out / "summary.json").read_text())
    except (OSError, ValueError) as error:
        print(f"soak: no summary.json ({error}); see {out / 'locust.log'}")
        return 1
    counted = summary["requests"]["errors"]
    injected = stats["expected_errors"]
    ok = True
    print(f"\n{'category':22}{'injected':>10}{'counted':>10}")
    for category in sorted(set(counted) | set(injected)):
        a, b = injected.get(category, 0), counted.get(category, 0)
        ok &= a == b
        print(f"{category:22}{a:10,}{b:10,}  {'ok' if a == b else 'MISMATCH'}")
    successes = stats["requests"].get("none", 0)
    print(
        f"{'(success)':22}{successes:10,}{summary['requests']['ok']:10,}  "
        f"{'ok' if successes == summary['requests']['ok'] else 'MISMATCH'}"
    )
    ok &= successes == summary["requests"]["ok"]
    total = sum(stats["requests"].values())
    print(
        f"requests {total:,}, faults injected {sum(stats['injected'].values()):,} "
        f"({sum(stats['injected'].values()) / max(total, 1):.2%})"
    )
    tpot = summary["metrics"]["tpot"]
    print(
        f"TPOT count {tpot['count']:,} (successful requests x {args.output_tokens - 1}: "
        f"{summary['requests']['ok'] * (args.output_tokens - 1):,}), "
        f"p50 {tpot['p50']:.3f} ms, p99.9 {tpot['p99.9']:.3f} ms"
    )

    warm_s = max(30.0, args.minutes * 60 * 0.10)
    after = [rss for elapsed, rss in samples if elapsed >= warm_s]
    if len(after) >= 2:
        print(f"\nRSS growth from the first sample after {warm_s:.0f} s to the last:")
        for index, name in enumerate(names):
            first = next((rss[index] for rss in after if rss[index]), None)
            last = next((rss[index] for rss in reversed(after) if rss[index]), None)
            if first and last:
                growth = last / first - 1
                ok &= growth <= RSS_TOLERANCE
                verdict = "flat" if growth <= RSS_TOLERANCE else "GROWING"
                print(f"  {name:10} {first:8.1f} -> {last:8.1f} MB  {growth:+.1%}  {verdict}")
    else:
        print(f"\nRSS: run longer than {warm_s:.0f} s + 2 samples for a growth verdict")
    print(f"\nsoak: {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
