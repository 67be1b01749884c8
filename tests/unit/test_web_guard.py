"""The web guard's rules, one by one (the process tests drive them through Locust)."""

from __future__ import annotations

import socket

import pytest

from tpot_locust.harness.web.web_guard import allowed_hosts, host_refusal, origin_refusal
from tpot_locust.scenario.tunable import untunable


@pytest.mark.parametrize(
    "host", ["127.0.0.1:8089", "localhost:8089", "[::1]:8089", "10.0.0.7", "ui.localhost:80"]
)
def test_this_machine_by_address_or_localhost_passes(host: str) -> None:
    assert host_refusal(host, set()) is None


def test_another_name_is_refused_unless_allowed(monkeypatch: pytest.MonkeyPatch) -> None:
    assert "TPOT_WEB_ALLOWED_HOSTS" in (host_refusal("evil.example:8089", set()) or "")
    monkeypatch.setenv("TPOT_WEB_ALLOWED_HOSTS", "locust.internal, *.not-a-glob")
    allowed = allowed_hosts()
    assert host_refusal("locust.internal:8089", allowed) is None
    assert host_refusal(f"{socket.gethostname()}:8089", allowed) is None
    assert host_refusal("evil.example", allowed) is not None
    assert host_refusal("anything", {"*"}) is None


def _request(method: str, **headers: str) -> dict[str, str]:
    environ = {"REQUEST_METHOD": method, "HTTP_HOST": "127.0.0.1:8089"}
    environ.update({f"HTTP_{name.upper()}": value for name, value in headers.items()})
    return environ


def test_only_state_changing_requests_from_another_site_are_refused() -> None:
    assert origin_refusal(_request("GET", origin="http://evil.example")) is None
    assert origin_refusal(_request("POST")) is None  # curl, tpot-locust sweep
    assert origin_refusal(_request("POST", origin="http://127.0.0.1:8089")) is None
    assert origin_refusal(_request("POST", sec_fetch_site="same-origin")) is None
    assert origin_refusal(_request("POST", origin="http://evil.example")) is not None
    assert origin_refusal(_request("POST", origin="null")) is not None
    assert origin_refusal(_request("DELETE", sec_fetch_site="cross-site")) is not None
    assert origin_refusal(_request("POST", sec_fetch_site="same-site")) is not None


def test_tunable_settings_are_plain_load_settings() -> None:
    assert untunable(["classes.chat.users=8", "duration=12s", "warmup=0s"]) is None
    assert "cannot be set" in (untunable(["classes.chat.dataset=/etc/passwd"]) or "")
    assert "cannot be set" in (untunable(["server.host=http://x"]) or "")
    assert "not a plain number" in (untunable(["classes.chat.users=&a [*a]"]) or "")
    assert "not a plain number" in (untunable(["classes.chat.think_time={dist: x}"]) or "")
    assert "at most" in (untunable([f"classes.c{i}.users=1" for i in range(33)]) or "")
