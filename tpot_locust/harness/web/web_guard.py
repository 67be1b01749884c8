"""Who may drive the web UI: requests from the page itself, never from another site.

Locust's UI answers any ``Origin`` (``flask_cors`` with ``*``), keeps no CSRF token and
sets its session cookie without ``SameSite``: any page a tester opens could start, stop or
reconfigure a test through their browser, and read its results. This guard sits in front of
the whole Flask app (a WSGI wrapper, so it sees every route, Locust's and ours):

- a state-changing request (POST, PUT, PATCH, DELETE) from another origin is refused: its
  ``Origin`` must be the page's own, and ``Sec-Fetch-Site`` (sent by every current browser)
  ``same-origin`` or ``none``; clients that send neither (curl, ``tpot-locust sweep``) pass;
- no ``Access-Control-*`` header leaves, so another site's script cannot read a response;
- the ``Host`` a request names must be this machine (an IP address, ``localhost``, its
  host name) or one listed in ``TPOT_WEB_ALLOWED_HOSTS`` (comma-separated; ``*`` any):
  a DNS-rebinding page cannot pose as the UI's own origin;
- session cookies are ``SameSite=Lax`` (``--web-login``).
"""

from __future__ import annotations

import ipaddress
import json
import socket
from collections.abc import Callable, Iterable
from typing import Any

from tpot_locust.common import env_vars

STATE_CHANGING = frozenset({"POST", "PUT", "PATCH", "DELETE"})
SAME_SITE_FETCHES = frozenset({"same-origin", "none"})
MAX_REQUEST_BYTES = 1024 * 1024  # a Start form is a few hundred bytes

StartResponse = Callable[..., Any]
WSGIApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]


def allowed_hosts() -> set[str]:
    """Host names (lower case) this UI answers to besides IP addresses and ``localhost``."""
    host = socket.gethostname().lower()  # no DNS lookup (getfqdn can wait on a resolver)
    names = {host, host.partition(".")[0]}
    names |= {n.strip().lower() for n in env_vars.text(env_vars.WEB_ALLOWED_HOSTS).split(",")}
    return {name for name in names if name}


def host_refusal(host_header: str, allowed: set[str]) -> str | None:
    """Why a request naming ``host_header`` is refused (None: it names this machine)."""
    name = _host_name(host_header)
    if "*" in allowed or name in allowed or name == "localhost" or name.endswith(".localhost"):
        return None
    try:
        ipaddress.ip_address(name)
        return None
    except ValueError:
        pass
    return (
        f"Host {name[:80]!r} is not this machine: add it to {env_vars.WEB_ALLOWED_HOSTS} "
        "where Locust is started to reach the web UI by that name"
    )


def origin_refusal(environ: dict[str, Any]) -> str | None:
    """Why a state-changing request is refused as coming from another site (None: it may
    pass). Read-only requests always pass: they change nothing, and without CORS headers
    another site cannot read what they return."""
    if environ.get("REQUEST_METHOD", "GET").upper() not in STATE_CHANGING:
        return None
    fetch_site = environ.get("HTTP_SEC_FETCH_SITE")
    if fetch_site is not None and fetch_site.lower() not in SAME_SITE_FETCHES:
        return f"refused: a {fetch_site[:20]} request (only the UI's own page may change a test)"
    origin = environ.get("HTTP_ORIGIN")
    if origin is None:
        return None
    scheme = environ.get("wsgi.url_scheme", "http")
    own = f"{scheme}://{environ.get('HTTP_HOST', '')}".lower()
    if origin.lower().rstrip("/") != own:
        return f"refused: Origin {origin[:80]!r} is not this UI ({own})"
    return None


def _host_name(host_header: str) -> str:
    host = host_header.strip().lower()
    if host.startswith("["):  # [::1]:8089
        return host[1:].partition("]")[0]
    return host.rpartition(":")[0] if host.count(":") == 1 else host


class WebGuard:
    """The WSGI wrapper: refuses what the module docstring lists, strips CORS headers."""

    def __init__(self, app: WSGIApp, allowed: set[str]) -> None:
        self.app = app
        self.allowed = allowed

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        why = host_refusal(environ.get("HTTP_HOST", ""), self.allowed) or origin_refusal(environ)
        if why is not None:
            return refuse(start_response, 403, why)

        def start_without_cors(status: str, headers: list[tuple[str, str]], *exc: Any) -> Any:
            kept = [(k, v) for k, v in headers if not k.lower().startswith("access-control-")]
            return start_response(status, kept, *exc)

        return self.app(environ, start_without_cors)


def refuse(start_response: StartResponse, status: int, message: str) -> list[bytes]:
    """A refusal as Locust's own form errors read (``success: false`` and the reason)."""
    body = json.dumps({"success": False, "message": message}).encode()
    reason = {400: "Bad Request", 403: "Forbidden"}[status]
    headers = [("Content-Type", "application/json"), ("Content-Length", str(len(body)))]
    start_response(f"{status} {reason}", headers)
    return [body]


def install(app: Any) -> None:
    """Put the guard in front of a Flask ``app`` and make its cookies ``SameSite=Lax``."""
    app.config["SESSION_COOKIE_SAMESITE"] = "Lax"
    app.config["REMEMBER_COOKIE_SAMESITE"] = "Lax"
    app.config["SESSION_COOKIE_HTTPONLY"] = True
    app.config["MAX_CONTENT_LENGTH"] = MAX_REQUEST_BYTES
    app.wsgi_app = WebGuard(app.wsgi_app, allowed_hosts())
