"""Writing a results file without following what was planted in its place.

A results folder may be shared, reused or prepared by someone else: a symlink named
``report.html`` (or ``truth.jsonl``, ``summary.json.tmp``) pointing at a file outside it
made a run overwrite that file. Every file we write there goes through here:

- ``write_file``: whole or not at all, through a fresh temporary file beside it (created
  with ``O_EXCL``, so never through a link) renamed over the name; a link there is
  replaced, its target untouched.
- ``open_for_writing``: a file written as a run goes (an interval log, the truth, a
  sampler's lines). ``"w"`` removes whatever link or file holds the name and creates a new
  regular file (``O_EXCL | O_NOFOLLOW``: a link planted in between is an error, never
  followed); ``"a"`` appends to a regular file (``O_NOFOLLOW``; a link is replaced by a new
  file). A name held by a directory, FIFO or device is an ``OSError`` that says so.
- ``make_folder``: a folder of ours inside it (a link in its place is replaced).
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from pathlib import Path
from typing import IO, Literal

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
MODE = 0o666  # less the process's umask, as ``open`` makes a file


def _umask() -> int:
    """The process's umask: Linux says it in /proc; elsewhere it is read by setting it and
    back (no call only reads it; a thread creating a file meanwhile would get 0)."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_file(path: Path, data: str | bytes) -> None:
    """``data`` (text as UTF-8) at ``path``, whole or not at all, never through a link."""
    _refuse_non_regular(path)
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, MODE & ~_umask())  # mkstemp's 0600: as a plain write's, the umask's
        with os.fdopen(fd, "wb") as handle:
            handle.write(data.encode("utf-8") if isinstance(data, str) else data)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def open_for_writing(path: Path, mode: Literal["w", "a"] = "w") -> IO[str]:
    """``path`` opened for text written as the run goes, as a regular file we created (or,
    for ``"a"``, one that was there), never through a link."""
    _refuse_non_regular(path)
    flags = os.O_WRONLY | os.O_CREAT | _NOFOLLOW | _CLOEXEC
    if mode == "w" or path.is_symlink():
        path.unlink(missing_ok=True)
        flags |= os.O_EXCL  # a link planted since the unlink: EEXIST, not followed
    else:
        flags |= os.O_APPEND
    fd = os.open(path, flags, MODE)  # the umask applies
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path}: not a regular file")
        opened = os.fdopen(fd, mode, encoding="utf-8")  # one open of the file, not two
        opened.buffer.raw.name = str(path)  # type: ignore[attr-defined]  # named, not numbered
        return opened
    except BaseException:
        os.close(fd)
        raise


def make_folder(path: Path) -> None:
    """A folder of the results (``histograms/``, ``workers/``): a link in its place is
    replaced by a folder of ours (the results folder itself is the user's to choose)."""
    if path.is_symlink():
        path.unlink()
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.mkdir(path)
    except FileExistsError:  # ours from before, or a link planted since the unlink: which
        if not stat.S_ISDIR(os.lstat(path).st_mode):
            raise OSError(
                f"{path}: not a folder of ours (a link or a file holds its name)"
            ) from None


def clear_results(*paths: Path) -> None:
    """A previous run's results in a reused folder, removed before this one starts: a file,
    a link (never its target) or a folder of ours (``shutil.rmtree`` follows no link)."""
    for path in paths:
        if path.is_symlink() or path.is_file():
            path.unlink()
        elif path.is_dir():
            shutil.rmtree(path)


def clear_temporaries(folder: Path) -> None:
    """The temporary files a writer killed mid-write left in ``folder`` (``write_file``'s
    ``.NAME.XXXXXXXX.tmp``: a rename that never came)."""
    for path in folder.glob(".*.tmp"):
        if path.is_file() and not path.is_symlink():
            path.unlink(missing_ok=True)


def check_writable(paths: list[Path]) -> None:
    """Before a run starts anything: each of ``paths`` is free or a file (or a link: it
    will be replaced), else an ``OSError`` that names it (a FIFO named ``truth.jsonl``
    held the simulator 20 s, then ended the run in a traceback)."""
    for path in paths:
        _refuse_non_regular(path)


def _refuse_non_regular(path: Path) -> None:
    """A name held by a directory, FIFO, socket or device: an error that says what it is
    (a link is replaced, never followed: not checked here)."""
    try:
        held = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(held.st_mode) or stat.S_ISREG(held.st_mode):
        return
    kind = "a directory" if stat.S_ISDIR(held.st_mode) else "not a regular file"
    raise OSError(f"{path}: cannot write the results file: {kind} holds its name")


__all__ = [
    "check_writable",
    "clear_results",
    "clear_temporaries",
    "make_folder",
    "open_for_writing",
    "write_file",
]
