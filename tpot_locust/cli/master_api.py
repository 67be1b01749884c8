"""A running Locust master's web UI, as a sweep drives it: the same HTTP calls its page
makes (``/swarm``, ``/stop``, ``/stats/requests``) and our ``/tpot/summary.json``.

Plain ``urllib``: a few control requests per step, never on the measuring path.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

BUSY_STATES = ("spawning", "running", "cleanup", "stopping")
TIMEOUT_S = 10.0


class MasterError(ValueError):
    """The master could not be reached, or refused a call: the message says which (a usage
    error, exit 2, like a wrong host)."""


@dataclass
class MasterState:
    state: str  # Locust's runner state: ready, spawning, running, stopped, ...
    workers: int  # connected workers (0 for a local runner)
    distributed: bool


class MasterAPI:
    def __init__(self, url: str) -> None:
        parsed = urllib.parse.urlsplit(url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ValueError(f"--master-url {url}: expected http://HOST:PORT[/base-path]")
        self.url = url.rstrip("/")

    def _call(self, path: str, form: dict[str, str] | None = None) -> Any:
        data = None if form is None else urllib.parse.urlencode(form).encode()
        request = urllib.request.Request(self.url + path, data, method="GET" if form is None
                                         else "POST")  # fmt: skip
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
                body = response.read()
        except urllib.error.HTTPError as error:
            raise MasterError(f"{self.url}{path}: HTTP {error.code} {error.reason}") from None
        except (OSError, urllib.error.URLError) as error:
            reason = getattr(error, "reason", error)
            raise MasterError(f"cannot reach the master at {self.url}: {reason}") from None
        try:
            return json.loads(body)
        except ValueError:
            raise MasterError(f"{self.url}{path}: not JSON (is this a Locust web UI?)") from None

    def state(self) -> MasterState:
        stats = self._call("/stats/requests")
        workers = stats.get("workers")
        return MasterState(str(stats.get("state")), len(workers or []), workers is not None)

    def summary(self) -> dict[str, Any]:
        """The current test's summary (the last test's, as written, once it stopped)."""
        try:
            return self._call("/tpot/summary.json")
        except MasterError as error:
            if "HTTP 404" in str(error):
                raise MasterError(
                    f"{self.url} has no /tpot/summary.json: a Locust web UI without "
                    "tpot-locust (run the scenario locustfile, locustfiles/scenario.py)"
                ) from None
            raise

    def histograms(self) -> dict[str, Any]:
        """The current test's totals as ``histograms.json`` holds them (with ``test``)."""
        return self._call("/tpot/histograms.json")

    def swarm(self, form: dict[str, str]) -> None:
        answer = self._call("/swarm", form)
        if not answer.get("success", False):
            raise MasterError(f"the master refused the step: {answer.get('message')}")

    def stop(self) -> None:
        self._call("/stop", {})
