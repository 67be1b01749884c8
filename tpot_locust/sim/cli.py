"""Command line of the simulator (``python -m tpot_locust.sim`` / ``tpot-locust sim``)."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from ..distributions import Distribution, DistributionError, parse_distribution
from .server import SimConfig, serve

READY_PREFIX = "tpot-sim listening on "


def distribution_arg(text: str) -> Distribution:
    """A number or a JSON/YAML mapping such as ``{"dist": "uniform", "min": 1, "max": 3}``."""
    try:
        spec: Any = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise argparse.ArgumentTypeError(f"not a number or JSON/YAML mapping: {exc}") from None
    try:
        return parse_distribution(spec)
    except DistributionError as exc:
        where = f" ({exc.key})" if exc.key else ""
        raise argparse.ArgumentTypeError(f"bad distribution {text!r}{where}: {exc}") from None


def build_arg_parser(prog: str = "python -m tpot_locust.sim") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Simulated OpenAI-compatible streaming server (vLLM format) with a "
        "ground-truth log of every token event's send time.",
    )
    add = parser.add_argument
    add("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    add("--port", type=int, default=8000, help="port; 0 picks a free one (default 8000)")
    add("--model", default="tpot-sim", help="model name served (default tpot-sim)")
    add("--ttft-ms", type=distribution_arg, default="20", help="time to first token, ms")
    add("--gap-ms", type=distribution_arg, default="2", help="gap between tokens, ms")
    add(
        "--natural-tokens",
        type=distribution_arg,
        default='{"dist": "lognormal", "mean": 400, "stddev": 200}',
        help="natural output length when ignore_eos is false (default lognormal 400/200)",
    )
    add("--default-max-tokens", type=int, default=256, help="max_tokens when not given")
    add("--seed", type=int, default=0, help="seed for timings and natural lengths")
    add("--truth", type=Path, default=None, help="ground-truth JSON-lines file to write")
    add("--ready-file", type=Path, default=None, help="write the URL here once listening")
    return parser


def write_ready_file(path: Path, url: str) -> None:
    """Atomically (temp file + rename) so a reader never sees a partial URL."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(url + "\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def config_from_args(args: argparse.Namespace) -> SimConfig:
    return SimConfig(
        host=args.host,
        port=args.port,
        model=args.model,
        ttft_ms=args.ttft_ms,
        gap_ms=args.gap_ms,
        natural_tokens=args.natural_tokens,
        seed=args.seed,
        default_max_tokens=args.default_max_tokens,
        truth_path=args.truth,
    )


def _announcer(ready_file: Path | None) -> Callable[[str], None]:
    def announce(url: str) -> None:
        if ready_file is not None:
            write_ready_file(ready_file, url)
        print(READY_PREFIX + url, flush=True)

    return announce


def main(argv: list[str] | None = None) -> int:
    """Run the simulator until SIGTERM/SIGINT; returns the exit status (0 on a clean stop)."""
    args = build_arg_parser().parse_args(argv)
    if args.default_max_tokens < 1:
        print("--default-max-tokens must be >= 1", file=sys.stderr)
        return 2
    try:
        asyncio.run(serve(config_from_args(args), _announcer(args.ready_file)))
    except OSError as exc:  # e.g. port in use, truth file not writable
        print(f"tpot-sim: {exc}", file=sys.stderr)
        return 1
    return 0
