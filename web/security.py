"""Who may connect: an optional API key (constant-time check) and an Origin allow-list for browsers."""

from __future__ import annotations

import hmac
from dataclasses import dataclass
from typing import Mapping
from urllib.parse import urlsplit

API_KEY_ENV = "SPECSCRIBE_API_KEY"
QUERY_KEY = "api_key"


@dataclass(frozen=True)
class SecurityOptions:
    """Access rules of one server.

    Attributes:
        api_key: required key, or None for an open server (the default on 127.0.0.1). Clients send it as
            `Authorization: Bearer KEY`, `X-API-Key: KEY` or the query parameter `?api_key=KEY`
            (browsers cannot set headers on a WebSocket).
        allowed_origins: Origins (scheme://host[:port]) whose pages may open a WebSocket or call the API.
            Empty: same origin only (the page this server serves). "*" allows every origin.
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


def origin_ok(options: SecurityOptions, origin: str | None, host: str | None) -> bool:
    """True for requests without Origin, for allowed origins, and (with no list) for the same origin."""
    if origin is None:
        return True
    origin = origin.rstrip("/").lower()
    allowed = {o.rstrip("/").lower() for o in options.allowed_origins}
    if "*" in allowed or origin in allowed:
        return True
    if allowed:
        return False
    parts = urlsplit(origin)
    if not host or parts.scheme not in ("http", "https"):
        return False
    return parts.netloc == host.lower()
