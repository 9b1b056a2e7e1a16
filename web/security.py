"""Who may connect: an optional API key (constant-time check) and an Origin allow-list for browsers.

Same origin (a page served by this server) is judged by comparing Origin with Host, and a DNS-rebinding page
controls both: evil.example resolved to 127.0.0.1 sends `Origin: http://evil.example:8000` and
`Host: evil.example:8000`. So on a server that listens on loopback, a browser's request must also name a
loopback host (or a listed origin's host) in Host; no page but one the user opened on this machine does.
"""

from __future__ import annotations

import hmac
import ipaddress
from dataclasses import dataclass
from typing import Any, Mapping
from urllib.parse import urlsplit

API_KEY_ENV = "SPECSCRIBE_API_KEY"
QUERY_KEY = "api_key"
LOOPBACK_SCOPE = "specscribe.loopback"  # ASGI scope key: True when the server listens on a loopback address only


@dataclass(frozen=True)
class SecurityOptions:
    """Access rules of one server.

    Attributes:
        api_key: required key, or None for an open server (the default on 127.0.0.1). Clients send it as
            `Authorization: Bearer KEY`, `X-API-Key: KEY` or the query parameter `?api_key=KEY`
            (browsers cannot set headers on a WebSocket).
        allowed_origins: Origins (scheme://host[:port]) whose pages may open a WebSocket or call the API, besides
            the server's own page (same origin), which is always allowed. "*" allows every origin.
            Requests without an Origin header (non-browser clients) are not affected.
    """

    api_key: str | None = None
    allowed_origins: tuple[str, ...] = ()


def presented_key(headers: Mapping[str, str], query: Mapping[str, str]) -> str | None:
    """The key a request carries, from the Authorization/X-API-Key headers or the query string."""
    auth = headers.get("authorization", "")
    if auth[:7].lower() == "bearer ":
        return auth[7:].strip()
    if headers.get("x-api-key"):
        return headers["x-api-key"].strip()
    return query.get(QUERY_KEY)


def key_ok(options: SecurityOptions, headers: Mapping[str, str], query: Mapping[str, str]) -> bool:
    """True when no key is required or the presented key matches (hmac.compare_digest)."""
    if not options.api_key:
        return True
    given = presented_key(headers, query)
    if given is None:
        return False
    return hmac.compare_digest(given.encode("utf-8", "surrogatepass"), options.api_key.encode("utf-8", "surrogatepass"))


def origin_ok(options: SecurityOptions, origin: str | None, host: str | None, *, loopback: bool = False) -> bool:
    """True for requests without Origin, for allowed origins, and for the same origin (the server's own page).

    loopback: the server listens on a loopback address only. Same origin then also needs a Host that names a
    loopback host or a listed origin's host (DNS rebinding: see the module docstring).
    """
    if origin is None:
        return True
    origin = origin.rstrip("/").lower()
    allowed = {o.rstrip("/").lower() for o in options.allowed_origins}
    if "*" in allowed or origin in allowed:
        return True
    parts = urlsplit(origin)
    if not host or parts.scheme not in ("http", "https") or parts.netloc != host.lower():
        return False
    return not loopback or is_loopback_host(host) or host.lower() in {urlsplit(o).netloc for o in allowed}


def is_loopback_host(host: str | None) -> bool:
    """True for a Host header (or bare host) naming this machine's loopback, any port: localhost, 127.x.x.x, [::1]."""
    name = (host or "").strip().lower()
    if name.startswith("["):  # [v6] or [v6]:port
        name = name[1:].split("]", 1)[0]
    elif name.count(":") == 1:  # host:port (a bare v6 address has several colons)
        name = name.split(":", 1)[0]
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def on_loopback(scope: Mapping[str, Any]) -> bool:
    """Whether a request reached a server that listens on loopback only: as the server said when it started
    (web/server.py puts it in the scope), else from the address the connection reached (scope["server"])."""
    said = scope.get(LOOPBACK_SCOPE)
    if said is not None:
        return bool(said)
    server = scope.get("server")
    return bool(server) and is_loopback_host(str(server[0]))
