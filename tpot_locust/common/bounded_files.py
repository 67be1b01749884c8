"""Reading a file a user named, with bounds: a regular file, a size cap, a line-length cap.

A scenario names files (datasets, traces, an empirical distribution's lengths, the
scenario itself). Read whole and unchecked, ``/dev/zero`` or a FIFO grows memory without
end and a 1 GB file with no newline is held whole; here a file is refused before it is
read (not a regular file, or larger than its cap) and a line is refused while it is read,
once it passes its cap. Every refusal is a ``BoundedFileError`` (a ``ValueError``) whose
message says which limit, and ``line`` where a line broke it.
"""

from __future__ import annotations

import csv
import itertools
import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO, TypeVar

_Parsed = TypeVar("_Parsed")

__all__ = [
    "BoundedFileError",
    "cached_by_file",
    "DATA_FILE_MAX_BYTES",
    "DISTRIBUTION_FILE_MAX_BYTES",
    "LINE_MAX_BYTES",
    "SCENARIO_FILE_MAX_BYTES",
    "read_lines",
    "read_text",
]

MIB = 1024 * 1024
DATA_FILE_MAX_BYTES = 256 * MIB  # datasets and traces
DISTRIBUTION_FILE_MAX_BYTES = 16 * MIB  # an empirical distribution's lengths
SCENARIO_FILE_MAX_BYTES = 1 * MIB  # a scenario file (a few KiB in practice)
LINE_MAX_BYTES = 8 * MIB  # one JSONL line or CSV row: a long prompt fits many times
# The csv module's own cap on a field (131,072 characters) is below a line's: a long prompt
# in a dataset or a trace CSV ended in a traceback. A field is bounded by its line instead
# (process-wide, set where every CSV reader of ours reads its lines).
csv.field_size_limit(max(csv.field_size_limit(), LINE_MAX_BYTES))
_CHUNK = 1 * MIB
_CACHED_FILES = 4  # parsed files kept per loader


class BoundedFileError(ValueError):
    """A file refused, or a limit it broke; ``line`` (1-based) when a line broke it."""

    def __init__(self, message: str, line: int = 0) -> None:
        super().__init__(message)
        self.line = line


def _size_text(size: int) -> str:
    return f"{size // MIB} MiB" if size % MIB == 0 else f"{size} bytes"


def _open_regular(path: Path, max_bytes: int, follow_links: bool = True) -> BinaryIO:
    """The file opened for reading, if it is a regular file within ``max_bytes``
    (``follow_links`` False: not a link either, as a file of a results folder is read).

    Checked before opening (opening a FIFO blocks until a writer comes) and again on the
    open descriptor (the path may have been replaced in between)."""
    try:
        before = os.stat(path) if follow_links else os.lstat(path)
    except (OSError, ValueError) as error:  # ValueError: a NUL in the name
        raise BoundedFileError(
            f"cannot read: {getattr(error, 'strerror', None) or error}"
        ) from None
    _check_kind(before.st_mode, before.st_size, max_bytes)
    try:
        flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0)
        fd = os.open(path, flags if follow_links else flags | getattr(os, "O_NOFOLLOW", 0))
    except (OSError, ValueError) as error:  # ValueError: a NUL in the name
        raise BoundedFileError(
            f"cannot read: {getattr(error, 'strerror', None) or error}"
        ) from None
    try:
        after = os.fstat(fd)
        _check_kind(after.st_mode, after.st_size, max_bytes)
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "rb")


def _check_kind(mode: int, size: int, max_bytes: int) -> None:
    if stat.S_ISLNK(mode):
        raise BoundedFileError("cannot read: a link, not a file (links are not followed here)")
    if stat.S_ISDIR(mode):
        raise BoundedFileError("cannot read: is a directory, not a file")
    if not stat.S_ISREG(mode):
        raise BoundedFileError("cannot read: not a regular file (a device, FIFO or socket)")
    if size > max_bytes:
        raise BoundedFileError(f"the file is {size:,} bytes; the limit is {_size_text(max_bytes)}")


def _decode(data: bytes, line: int = 0) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        where = f"line {line}: " if line else ""
        raise BoundedFileError(f"{where}not UTF-8 text ({error.reason})", line) from None


def read_text(path: Path, max_bytes: int, follow_links: bool = True) -> str:
    """The whole file as UTF-8 text, refused past ``max_bytes`` (also if it grows while read);
    ``follow_links`` False: a link in its place is refused, not followed."""
    with _open_regular(path, max_bytes, follow_links) as file:
        chunks, total = [], 0
        while chunk := file.read(min(_CHUNK, max_bytes + 1 - total)):
            chunks.append(chunk)
            total += len(chunk)
            if total > max_bytes:
                raise BoundedFileError(f"the file is over the limit of {_size_text(max_bytes)}")
    return _decode(b"".join(chunks))


def read_lines(
    path: Path, max_bytes: int, max_line: int = LINE_MAX_BYTES
) -> Iterator[tuple[int, str]]:
    """``(line number, text)`` for each line, its newline kept; a line is refused as soon as
    it passes ``max_line`` bytes, the file as soon as it passes ``max_bytes``."""
    with _open_regular(path, max_bytes) as file:
        total = 0
        for number in itertools.count(1):
            raw = file.readline(max_line + 1)
            if not raw:
                return
            total += len(raw)
            if total > max_bytes:
                raise BoundedFileError(
                    f"the file is over the limit of {_size_text(max_bytes)}", number
                )
            if len(raw) > max_line:
                raise BoundedFileError(
                    f"line {number} is longer than the limit of {_size_text(max_line)}", number
                )
            yield number, _decode(raw, number)


def cached_by_file(parse: Callable[[Path], _Parsed]) -> Callable[[Path], _Parsed]:
    """``parse`` once per process for each file as it is on disk (path, size, change
    time): a dataset checked by the loader and then dealt out to the users is read once,
    not two or three times (a 32 MiB dataset had cost a 2 s run 45 s). The result is
    shared: callers must not change it."""
    cache: dict[tuple[str, int, int, int], _Parsed] = {}

    def cached(path: Path) -> _Parsed:
        try:
            info = os.stat(path)
        except OSError:
            return parse(path)  # its own error says what is wrong
        key = (str(Path(path).resolve()), info.st_size, info.st_mtime_ns, info.st_ino)
        if key not in cache:
            if len(cache) >= _CACHED_FILES:
                cache.pop(next(iter(cache)))
            cache[key] = parse(path)
        return cache[key]

    return cached
