"""Benchmark output and options: Markdown tables, headers, shared command-line flags."""

from __future__ import annotations

import argparse
import os
import platform
import time
from collections.abc import Callable, Sequence
from typing import Any

SERVERS = ("independent", "engine")


def machine_line() -> str:
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return (
        f"{os.cpu_count()} cores, Python {platform.python_version()}, "
        f"{time.strftime('%Y-%m-%d %H:%M %Z')}, load average {load}"
    )


def print_header(title: str, notes: Sequence[str] = ()) -> None:
    print(f"## {title}\n")
    print(f"Machine: {machine_line()}")
    for note in notes:
        print(note)
    print(flush=True)


class Table:
    """A Markdown table printed row by row (so a long run shows progress)."""

    def __init__(self, columns: Sequence[str]) -> None:
        self.columns = list(columns)
        print("| " + " | ".join(self.columns) + " |")
        print("|" + "|".join("---:" for _ in self.columns) + "|", flush=True)

    def row(self, *cells: Any) -> None:
        print("| " + " | ".join(_cell(c) for c in cells) + " |", flush=True)


def _cell(value: Any) -> str:
    if isinstance(value, float):
        if value != value:  # nan
            return "-"
        if abs(value) >= 1000:
            return f"{value:,.0f}"
        if abs(value) >= 100:
            return f"{value:.0f}"
        if abs(value) >= 10:
            return f"{value:.1f}"
        return f"{value:.3f}" if abs(value) < 1 else f"{value:.2f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def ms(value: float) -> str:
    return "-" if value != value else f"{value:.3f}"


def signed_ms(value: float) -> str:
    return "-" if value != value else f"{value:+.3f}"


def percent(value: float) -> str:
    return "-" if value != value else f"{100 * value:.1f}%"


def parse_list(text: str, kind: Callable[[str], Any] = int) -> list[Any]:
    return [kind(item) for item in text.split(",") if item.strip()]


def base_parser(doc: str | None) -> argparse.ArgumentParser:
    lines = (doc or "").strip().splitlines()
    parser = argparse.ArgumentParser(
        description=lines[0] if lines else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="\n".join(lines[1:]),
    )
    parser.add_argument("--quick", action="store_true", help="a smoke run (~30 s)")
    return parser


def add_pin_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--no-pin",
        action="store_true",
        help="do not pin this client to one core and the simulator to the others",
    )


def add_load_arguments(parser: argparse.ArgumentParser) -> None:
    """``--server``, ``--fixed-length``, ``--no-pin``: the simulator's sending, request
    lengths, CPU pinning."""
    add_pin_argument(parser)
    parser.add_argument(
        "--fixed-length",
        action="store_true",
        help="every request exactly --tokens long (streams then end their requests together)",
    )
    add_server_argument(parser)


def add_server_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--server",
        choices=SERVERS,
        default="independent",
        help="independent: each stream on its own timer (the simulator's default mode); "
        "engine: one fixed step for all streams, as a batching server sends",
    )
