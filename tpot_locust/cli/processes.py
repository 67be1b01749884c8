"""The child processes of a run: started so that none outlives us, stopped in order.

Every child (the simulator, the Locust master or local runner, local workers) runs in its own
process group, so a terminal's Ctrl-C (SIGINT to the foreground group) reaches only this
process, which then stops the children in order; and on Linux each child gets SIGTERM
should this process die without doing so (``PR_SET_PDEATHSIG``), so none is orphaned.

On SIGINT or SIGTERM, ``Supervisor`` asks the Locust master (or local runner) to stop with
SIGTERM: Locust stops the users, the flush handshake collects every worker's final delta,
the results and the report are written. A second signal stops it at once: every Locust
process kills its users (``STOP_NOW_SIGNAL``, see ``harness/run/stop_now.py``), whose requests
in flight count as interrupted, and the results are written as after the first; a third
kills everything. The run's exit code is then 128 + the first signal's number (130, 143).

A master that dies (OOM-killed, evicted, SIGKILL) is noticed at once: its wait returns. The
workers still running it did not tell to quit are stopped now (their users killed at once,
then SIGTERM): each sends its last delta and writes ``workers/<id>.json``, all it recorded,
from which the run's results are rebuilt (``report.recovery``). They waited out Locust's
60 s heartbeat before, and the run saved nothing.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from types import FrameType

from tpot_locust.common.child_process import STOP_NOW_SIGNAL, child_options

WORKER_EXIT_S = 30.0
WORKER_QUIT_S = 2.0  # a master that ended as it should has told its workers to quit by then
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@dataclass
class LocustProcesses:
    """The commands of one run: a local runner, or a master and its local workers."""

    master: list[str]
    workers: list[list[str]]


class Supervisor:
    """Runs a master (or local runner) and its workers; turns our signals into an orderly stop."""

    def __init__(self, commands: LocustProcesses, env: dict[str, str]) -> None:
        self.commands = commands
        self.env = env
        self.master: subprocess.Popen[bytes] | None = None
        self.workers: list[subprocess.Popen[bytes]] = []
        self.signals: list[int] = []

    def run(self) -> int:
        previous = {sig: signal.signal(sig, self._on_signal) for sig in STOP_SIGNALS}
        try:
            return self._run()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _run(self) -> int:
        options = child_options()
        try:
            for command in self.commands.workers:
                worker = subprocess.Popen(
                    command, env=self.env, stdout=subprocess.DEVNULL, **options
                )
                self.workers.append(worker)
            if not self.signals:
                self.master = subprocess.Popen(self.commands.master, env=self.env, **options)
                code = self.master.wait()
            else:
                code = 1
        finally:
            self._wait_for_workers()
        return 128 + self.signals[0] if self.signals else code

    def _wait_for_workers(self) -> None:
        """Workers leave when the master quits. Where it was killed (a signal we did not send:
        OOM, eviction), ones still running ``WORKER_QUIT_S`` later were not told to: their
        users are stopped at once and they are asked to quit, which saves what each
        recorded; one that does not leave is killed."""
        killed = self.master is not None and (self.master.returncode or 0) < 0
        if killed and self.workers and not self.signals:
            deadline = time.monotonic() + WORKER_QUIT_S
            while any(w.poll() is None for w in self.workers) and time.monotonic() < deadline:
                time.sleep(0.05)
            left = [worker for worker in self.workers if worker.poll() is None]
            for worker in left:
                self._send(worker, STOP_NOW_SIGNAL)
            for worker in left:
                self._send(worker, signal.SIGTERM)
        for worker in self.workers:
            if self.signals and self.master is None:
                worker.terminate()
            try:
                worker.wait(timeout=WORKER_EXIT_S)
            except subprocess.TimeoutExpired:
                worker.kill()
                worker.wait()

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        self.signals.append(signum)
        count = len(self.signals)
        if count == 1:
            print(
                f"\ntpot-locust: {signal.Signals(signum).name}: stopping the run "
                "(the results are being written; signal again to stop sooner)",
                file=sys.stderr,
                flush=True,
            )
            self._send(self.master, signal.SIGTERM)
        elif count == 2:
            print(
                "tpot-locust: stopping now: requests in flight count as interrupted "
                "(signal again to end without writing results)",
                file=sys.stderr,
                flush=True,
            )
            for process in [self.master, *self.workers]:
                self._send(process, STOP_NOW_SIGNAL)
        else:
            for process in [self.master, *self.workers]:
                self._send(process, signal.SIGKILL)

    @staticmethod
    def _send(process: subprocess.Popen[bytes] | None, signum: int) -> None:
        if process is not None and process.poll() is None:
            try:
                process.send_signal(signum)
            except ProcessLookupError:
                pass


__all__ = ["LocustProcesses", "Supervisor"]
