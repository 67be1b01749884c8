"""The client's TLS context for https servers: the system's CAs, or a file of one's own.

Why one place: the scenario loader loads a ``server.tls.ca`` file once, so a bad one stops
a run before it starts, and every user of a process then shares the same context (loading
the system store per connection costs milliseconds of the loop).
"""

from __future__ import annotations

import ssl
from functools import cache


@cache
def client_tls_context(ca_file: str | None = None, verify: bool = True) -> ssl.SSLContext:
    """Verified against ``ca_file`` (PEM) or, without one, the system's CAs; with
    ``verify`` false, any certificate and host name is accepted (a test cluster's
    self-signed one: the traffic is still encrypted, the server is not authenticated).
    Raises ``OSError`` (``ssl.SSLError`` included) for a file that is not one."""
    context = ssl.create_default_context(cafile=ca_file)
    if not verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context
