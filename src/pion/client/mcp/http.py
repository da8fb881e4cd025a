"""``pion mcp``'s streamable-HTTP listener, protected like the Pion server itself.

The MCP server holds the tenant's Pion credentials, so whoever can reach its port can read and
change the tenant's memory. The rules (``pion mcp`` checks them before anything starts):

- on loopback (the default ``--host 127.0.0.1``) it serves as before;
- on any other address it refuses to start unless a bearer token is configured
  (``--auth-token-file PATH``) or ``--insecure`` is given explicitly;
- with a token, every HTTP request must carry ``Authorization: Bearer <token>`` (compared in
  constant time); anything else is answered ``401`` before it reaches the MCP transport;
- the SDK's Host/Origin allow-list (its DNS-rebinding protection) stays on everywhere: loopback
  names, the bind address itself, and the names given with ``--allowed-host``.
"""

from __future__ import annotations

import hmac
import ipaddress
from collections.abc import Sequence
from typing import Any

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]")
WILDCARDS = ("0.0.0.0", "::", "")


def is_loopback(host: str) -> bool:
    """True for a loopback listen address; ValueError for one that is not an address or ``localhost``."""
    if host == "localhost":
        return True
    return ipaddress.ip_address(host.strip("[]")).is_loopback


def read_token(path: str) -> str:
    """The bearer token in ``path`` (surrounding whitespace dropped); ValueError when empty."""
    with open(path, encoding="utf-8") as handle:
        token = handle.read().strip()
    if not token:
        raise ValueError(f"the token file {path} is empty")
    return token


def startup_refusal(host: str, token: str | None, insecure: bool) -> str | None:
    """Why ``pion mcp`` must not listen on ``host`` as configured, or None."""
    try:
        loopback = is_loopback(host)
    except ValueError:
        return f"--host '{host}' is not a valid IPv4 or IPv6 address"
    if loopback or token or insecure:
        return None
    return (f"refusing to listen on {host} without authentication: whoever reaches it could read and "
            "change this tenant's memory with the Pion credentials it holds. Give a bearer token "
            "(--auth-token-file PATH; clients send 'Authorization: Bearer <token>'), or listen on "
            "127.0.0.1; on a network you trust completely, pass --insecure.")


def allowed_hosts(host: str, extra: Sequence[str]) -> tuple[list[str], list[str]]:
    """The Host and Origin allow-lists: loopback, the bind address, and ``--allowed-host`` names."""
    names = list(LOOPBACK_HOSTS)
    if host not in WILDCARDS and host not in names:
        names.append(f"[{host}]" if ":" in host else host)
    names.extend(name for name in extra if name not in names)
    hosts: list[str] = []
    origins: list[str] = []
    for name in names:
        has_port = name.rsplit("]", 1)[-1].count(":") == 1
        hosts.extend([name] if has_port else [name, f"{name}:*"])
        for scheme in ("http", "https"):
            origins.extend([f"{scheme}://{name}"] if has_port else [f"{scheme}://{name}", f"{scheme}://{name}:*"])
    return hosts, origins


class BearerAuth:
    """ASGI middleware: HTTP requests without ``Authorization: Bearer <token>`` get a 401."""

    def __init__(self, app: Any, token: str) -> None:
        self.app = app
        self.expected = f"Bearer {token}".encode()

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope.get("type") in ("http", "websocket"):
            given = b""
            for name, value in scope.get("headers") or ():
                if name.lower() == b"authorization":
                    given = value
                    break
            if not hmac.compare_digest(given, self.expected):
                await _unauthorized(scope, receive, send)
                return
        await self.app(scope, receive, send)


async def _unauthorized(scope: dict, receive: Any, send: Any) -> None:
    body = b'{"error": "unauthorized: send Authorization: Bearer <token>"}'
    await send({"type": "http.response.start", "status": 401,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            (b"www-authenticate", b'Bearer realm="pion-mcp"')]})
    await send({"type": "http.response.body", "body": body})


def serve(server: Any, *, token: str | None, extra_hosts: Sequence[str] = ()) -> None:
    """Serve ``server`` (either SDK major) over streamable HTTP with the allow-list and the token."""
    import uvicorn
    from mcp.server.transport_security import TransportSecuritySettings

    settings = server._pion_http
    hosts, origins = allowed_hosts(settings["host"], extra_hosts)
    security = TransportSecuritySettings(enable_dns_rebinding_protection=True, allowed_hosts=hosts,
                                         allowed_origins=origins)
    if server._pion_sdk_major == 2:
        app = server.streamable_http_app(streamable_http_path=settings["streamable_http_path"],
                                         transport_security=security, host=settings["host"])
    else:
        server.settings.transport_security = security
        app = server.streamable_http_app()
    if token:
        app = BearerAuth(app, token)
    uvicorn.Server(uvicorn.Config(app, host=settings["host"], port=settings["port"], log_level="warning")).run()
