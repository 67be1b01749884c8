"""The web UI as a hostile page or person would use it (issue 25, items 1 and 2).

A plain ``locust -f locustfiles/scenario.py`` master, as on a cluster: its Start form may
set users, rate, run time, host and a scenario's tunable settings, nothing that reads or
writes a file, and nothing at all from another site.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.helpers.distributed import free_port
from tests.process.test_web_ui import wait_up

SCENARIO = """\
name: web-hostile
duration: 30s
classes:
  chat:
    users: 1
    prompt_tokens: 8
    output_tokens: 4
"""
ALIAS_BOMB = 'a: &a ["x","x","x","x","x","x","x","x","x"]\n' + "".join(
    f"{b}: &{b} [{', '.join(['*' + a] * 9)}]\n" for a, b in zip("abcdefgh", "bcdefghi", strict=True)
)


class Listener:
    """A TCP port that counts who connects: the 'other server' a form must not reach."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.connections = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            conn.close()


def request(
    url: str, data: dict[str, str] | None = None, headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], bytes]:
    body = urllib.parse.urlencode(data).encode() if data is not None else None
    req = urllib.request.Request(url, body, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=20) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


@contextmanager
def scenario_master(
    tmp_path: Path, *extra: str, env: dict[str, str] | None = None
) -> Iterator[str]:
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text(SCENARIO)
    port = free_port()
    environment = dict(os.environ, TPOT_SCENARIO=str(scenario), **(env or {}))
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "locust",
            "-f",
            str(ROOT / "locustfiles/scenario.py"),
            "--web-host",
            "127.0.0.1",
            "--web-port",
            str(port),
            "--host",
            "http://127.0.0.1:9",
            "--tpot-out",
            str(tmp_path / "out"),
            *extra,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=ROOT,
        env=environment,
    )
    ui = f"http://127.0.0.1:{port}"
    try:
        wait_up(ui + "/")
        yield ui
    finally:
        process.terminate()
        process.wait(timeout=30)


def refused(status: int, body: bytes, words: str) -> bool:
    answer = json.loads(body)
    return status == 400 and answer["success"] is False and words in answer["message"]


def test_the_form_sets_no_file_no_folder_no_interval(tmp_path: Path) -> None:
    planted = tmp_path / "private.jsonl"
    planted.write_text('{"prompt": "the private text"}\n')
    other = Listener()
    elsewhere = tmp_path / "elsewhere"
    with scenario_master(tmp_path) as ui:
        start = {"user_count": "1", "spawn_rate": "1", "host": other.url}
        status, _, body = request(
            ui + "/swarm", {**start, "tpot_set": f"classes.chat.dataset={planted}"}
        )
        assert refused(status, body, "'classes.chat.dataset' cannot be set for one test")
        status, _, body = request(ui + "/swarm", {**start, "tpot_out": str(elsewhere)})
        assert refused(status, body, "cannot set 'tpot_out'")
        for interval in ("nan", "-1", "0"):
            status, _, body = request(ui + "/swarm", {**start, "tpot_report_interval": interval})
            assert refused(status, body, "cannot set 'tpot_report_interval'")
        began = time.monotonic()
        status, _, body = request(ui + "/swarm", {**start, "tpot_set": ALIAS_BOMB})
        assert status == 400 and time.monotonic() - began < 5
        for field, value in (("user_count", "-1"), ("spawn_rate", "nan"), ("run_time", "x")):
            status, _, body = request(ui + "/swarm", {**start, field: value})
            assert refused(status, body, field), (field, body)
        # Locust's user-class settings: never a class's file or body
        req = urllib.request.Request(
            ui + "/user",
            json.dumps({"user_class_name": "chat", "dataset": str(planted)}).encode(),
            headers={"Content-Type": "application/json"},
        )
        with pytest.raises(urllib.error.HTTPError) as error:
            urllib.request.urlopen(req, timeout=10)
        assert error.value.code == 400 and b"cannot be set" in error.value.read()
        summary = json.loads(request(ui + "/tpot/summary.json")[2])
        assert summary["test"] == 0  # nothing started
    assert other.connections == 0
    assert not elsewhere.exists()


def test_a_tunable_setting_starts_and_a_bad_value_is_refused_as_the_loader_says(
    tmp_path: Path,
) -> None:
    with scenario_master(tmp_path) as ui:
        start = {"user_count": "1", "spawn_rate": "1", "run_time": "2s"}
        status, _, body = request(ui + "/swarm", {**start, "tpot_set": "classes.chat.users=-3"})
        assert refused(status, body, "classes.chat.users")
        status, _, body = request(ui + "/swarm", {**start, "tpot_set": "classes.chat.users=1"})
        assert status == 200 and json.loads(body)["success"] is True
        request(ui + "/stop", {})


def test_other_sites_can_neither_drive_nor_read_the_ui(tmp_path: Path) -> None:
    other = Listener()
    with scenario_master(tmp_path) as ui:
        start = {"user_count": "1", "spawn_rate": "1", "host": other.url}
        for headers in (
            {"Origin": "http://evil.example"},
            {"Origin": "null"},
            {"Sec-Fetch-Site": "cross-site"},
            {"Sec-Fetch-Site": "same-site"},
        ):
            status, _, body = request(ui + "/swarm", start, headers)
            assert status == 403 and b"refused" in body, headers
            status, _, _ = request(ui + "/stop", {}, headers)
            assert status == 403
        # a DNS-rebinding page: same origin to the browser, another host by name
        status, _, body = request(ui + "/tpot/summary.json", headers={"Host": "evil.example"})
        assert status == 403 and b"TPOT_WEB_ALLOWED_HOSTS" in body
        status, headers, _ = request(ui + "/tpot/summary.json", headers={"Origin": "http://x.y"})
        assert status == 200
        assert not [name for name in headers if name.lower().startswith("access-control-")]
        own = {"Origin": ui, "Sec-Fetch-Site": "same-origin"}
        status, _, body = request(ui + "/swarm", {**start, "run_time": "1s"}, own)
        assert status == 200 and json.loads(body)["success"] is True
        deadline = time.monotonic() + 10  # the users spawn after the answer (and the sampler)
        while not other.connections and time.monotonic() < deadline:
            time.sleep(0.05)
        request(ui + "/stop", {}, own)
    assert other.connections >= 1  # the page's own Start did reach the chosen host


def test_a_host_name_can_be_allowed(tmp_path: Path) -> None:
    with scenario_master(tmp_path, env={"TPOT_WEB_ALLOWED_HOSTS": "locust.test"}) as ui:
        status, _, _ = request(ui + "/tpot/summary.json", headers={"Host": "locust.test:8089"})
        assert status == 200


def test_login_cookies_are_same_site_lax(tmp_path: Path) -> None:
    port = free_port()
    ui = f"http://127.0.0.1:{port}"
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "locust",
            "-f",
            str(ROOT / "tests/helpers/locust_login.py"),
            "--web-login",
            "--web-host",
            "127.0.0.1",
            "--web-port",
            str(port),
            "--host",
            "http://127.0.0.1:9",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=ROOT,
    )
    try:
        wait_up(ui + "/login")
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
        connection.request("GET", "/tpot/summary.json")  # to the login page, with a session
        response = connection.getresponse()
        cookie = response.getheader("Set-Cookie") or ""
        connection.close()
        assert response.status == 302
        assert "SameSite=Lax" in cookie and "HttpOnly" in cookie
        status, _, _ = request(ui + "/swarm", {"user_count": "1"}, {"Origin": "http://e.x"})
        assert status == 403
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_report_interval_must_be_finite_and_in_range(tmp_path: Path) -> None:
    for value in ("nan", "-1", "inf", "0"):
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "locust",
                "-f",
                str(ROOT / "locustfiles/chat.py"),
                "--headless",
                "-t",
                "1s",
                "--tpot-report-interval",
                value,
            ],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=ROOT,
        )
        assert result.returncode != 0
        assert "must be a number of seconds from 0.1 to 60" in result.stderr, result.stderr
