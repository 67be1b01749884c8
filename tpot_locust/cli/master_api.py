"""A running Locust master's web UI, as a sweep drives it: the same HTTP calls its page
makes (``/swarm``, ``/stop``, ``/stats/requests``) and our ``/tpot/summary.json``.

A few control requests per step, never on the measuring path; each bounded in time and
size as a whole (``common.bounded_http``): a master that trickles or never ends its answer
is named, not waited on.
"""

from __future__ import annotations

import json
import urllib.parse
from dataclasses import dataclass
from typing import Any

from tpot_locust.common.bounded_http import ExchangeError, exchange

BUSY_STATES = ("spawning", "running", "cleanup", "stopping")
TIMEOUT_S = 20.0  # the whole answer, head and body
MAX_ANSWER_BYTES = 64 * 1024 * 1024  # an hour-long test's summary and time series: a few MB


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

    def _call(self, path: str, form: dict[str, str] | None = None) -> object:
        data = None if form is None else urllib.parse.urlencode(form).encode()
        headers = {} if form is None else {"Content-Type": "application/x-www-form-urlencoded"}
        try:
            answer = exchange(
                self.url + path, data, headers, total_s=TIMEOUT_S, max_bytes=MAX_ANSWER_BYTES
            )
        except ExchangeError as error:
            raise MasterError(f"cannot reach the master at {self.url}: {error}") from None
        if answer.status == 400 and form is not None:  # the master refused the form
            return _json(answer.body, self.url + path)
        if answer.status != 200:  # noqa: PLR2004
            raise MasterError(f"{self.url}{path}: HTTP {answer.status} {answer.reason}")
        return _json(answer.body, self.url + path)

    def state(self) -> MasterState:
        stats = self._call("/stats/requests")
        if not isinstance(stats, dict):
            raise MasterError(f"{self.url}/stats/requests: not a Locust web UI's answer")
        workers = stats.get("workers")
        return MasterState(str(stats.get("state")), len(workers or []), workers is not None)

    def summary(self) -> dict[str, Any]:
        """The current test's summary (the last test's, as written, once it stopped)."""
        try:
            return self._document("/tpot/summary.json")
        except MasterError as error:
            if "HTTP 404" in str(error):
                raise MasterError(
                    f"{self.url} has no /tpot/summary.json: a Locust web UI without "
                    "tpot-locust (run the scenario locustfile, locustfiles/scenario.py)"
                ) from None
            raise

    def histograms(self) -> dict[str, object]:
        """The current test's totals as ``histograms.json`` holds them (with ``test``)."""
        return self._document("/tpot/histograms.json")

    def _document(self, path: str) -> dict[str, object]:
        document = self._call(path)
        if not isinstance(document, dict):
            raise MasterError(f"{self.url}{path}: not a JSON object")
        return document

    def swarm(self, form: dict[str, str]) -> None:
        answer = self._call("/swarm", form)
        if not isinstance(answer, dict) or not answer.get("success", False):
            why = answer.get("message") if isinstance(answer, dict) else answer
            raise MasterError(f"the master refused the step: {str(why)[:500]}")

    def stop(self) -> None:
        self._call("/stop", {})


def _json(body: bytes, where: str) -> object:
    try:
        return json.loads(body)
    except (ValueError, RecursionError):
        raise MasterError(f"{where}: not JSON (is this a Locust web UI?)") from None
