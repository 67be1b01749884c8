"""A command run as a person runs it: in an interactive terminal (a pseudo-terminal whose
session it leads, so it is the terminal's foreground job), with a size, typed keys and the
screen as the terminal shows it.

Output to a file or a pipe hides what only a terminal does: a background process group that
touches it is stopped (SIGTTOU), Ctrl-C goes to the foreground group, long lines wrap.
"""

from __future__ import annotations

import fcntl
import math
import os
import pty
import re
import select
import signal
import struct
import termios
import time
import unicodedata
from pathlib import Path

CTRL_C = b"\x03"
_ESCAPES = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")


class Terminal:
    """``argv`` in a pseudo-terminal of ``rows`` x ``cols``; its output is kept as it comes."""

    def __init__(
        self,
        argv: list[str],
        *,
        cols: int = 100,
        rows: int = 30,
        env: dict[str, str] | None = None,
        cwd: Path | None = None,
    ) -> None:
        self.cols = cols
        self.output = bytearray()
        self.returncode: int | None = None
        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # the child: the session leader, the pty its controlling terminal
            try:
                _as_a_login_shell_starts_it()
                if cwd is not None:
                    os.chdir(cwd)
                os.execvpe(argv[0], argv, env if env is not None else dict(os.environ))
            finally:
                os._exit(127)
        fcntl.ioctl(self.fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))

    def type(self, keys: bytes) -> None:
        """Keys typed at the terminal (``CTRL_C``: SIGINT to its foreground group)."""
        os.write(self.fd, keys)

    def read_until(self, text: str, timeout_s: float) -> bool:
        """Reads output until ``text`` appears; False if it did not within ``timeout_s`` or
        the command ended first."""
        deadline = time.monotonic() + timeout_s
        while text.encode() not in self.output:
            if not self._read(deadline - time.monotonic()):
                return text.encode() in self.output
        return True

    def wait(self, timeout_s: float) -> int:
        """The command's exit status once it ended (128 + N for a signal N), its output read
        to the end; on timeout it is killed with its process group and AssertionError says
        what the terminal showed."""
        deadline = time.monotonic() + timeout_s
        while self._read(deadline - time.monotonic()):
            pass
        while self.returncode is None and time.monotonic() < deadline:
            self._reap()
            time.sleep(0.05)
        if self.returncode is None:
            signals = _signal_state(self.pid)
            self.kill()
            raise AssertionError(
                f"still running after {timeout_s:g} s ({signals}); the terminal showed:\n"
                f"{self.text[-4000:]}"
            )
        return self.returncode

    def kill(self) -> None:
        for target in (lambda: os.killpg(self.pid, signal.SIGKILL), lambda: os.kill(self.pid, 9)):
            try:
                target()
            except (ProcessLookupError, PermissionError):
                pass
        self._reap(block=True)
        os.close(self.fd)

    @property
    def text(self) -> str:
        return self.output.decode("utf-8", "replace").replace("\r\n", "\n")

    def screen_rows(self, start: str) -> list[str]:
        """The rows the terminal shows from the last line holding ``start`` to the end:
        each line wrapped at the terminal's width, as a terminal wraps it."""
        lines = self.text.split("\n")
        first = max(i for i, line in enumerate(lines) if start in line)
        rows: list[str] = []
        for line in lines[first:]:
            shown = _ESCAPES.sub("", line).rsplit("\r", 1)[-1]
            count = max(1, math.ceil(display_width(shown) / self.cols))
            rows += [shown] + [""] * (count - 1)
        while rows and not rows[-1].strip():
            rows.pop()
        return rows

    def _read(self, timeout_s: float) -> bool:
        """One read of the terminal's output; False at its end or the timeout."""
        if timeout_s <= 0:
            return False
        ready, _, _ = select.select([self.fd], [], [], timeout_s)
        if not ready:
            return False
        try:
            chunk = os.read(self.fd, 65536)
        except OSError:  # EIO: every process holding the terminal has ended
            return False
        self.output += chunk
        return bool(chunk)

    def _reap(self, block: bool = False) -> None:
        if self.returncode is not None:
            return
        try:
            pid, status = os.waitpid(self.pid, 0 if block else os.WNOHANG)
        except ChildProcessError:
            return
        if pid:
            code = os.waitstatus_to_exitcode(status)
            self.returncode = 128 - code if code < 0 else code


def display_width(text: str) -> int:
    """Columns ``text`` takes in a terminal (East Asian wide characters take two)."""
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


__all__ = ["CTRL_C", "Terminal", "display_width"]


def _as_a_login_shell_starts_it() -> None:
    """The child's signals as a user's terminal gives them: none blocked, none ignored.
    A forked child keeps its parent's mask and ignored signals across exec (Python itself
    ignores SIGPIPE and SIGXFSZ; a test run may have left more): a command that ignored
    SIGINT this way would not be the one a user runs."""
    signal.pthread_sigmask(signal.SIG_SETMASK, [])
    for number in (
        signal.SIGINT,
        signal.SIGQUIT,
        signal.SIGTERM,
        signal.SIGHUP,
        signal.SIGTSTP,
        signal.SIGTTIN,
        signal.SIGTTOU,
        signal.SIGPIPE,
        signal.SIGXFSZ,
    ):
        signal.signal(number, signal.SIG_DFL)


def _signal_state(pid: int) -> str:
    """What a command that ignored a Ctrl-C had: its state and signal masks (Linux)."""
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return "its /proc status unreadable"
    kept = ("State", "SigPnd", "ShdPnd", "SigBlk", "SigIgn", "SigCgt", "Threads")
    return "; ".join(line.replace("\t", " ") for line in lines if line.startswith(kept))
