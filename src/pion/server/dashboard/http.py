"""The dashboard's HTTP/1.1, as small as the page needs: one request per connection, ``GET``
and ``POST`` with a body of at most ``MAX_BODY`` bytes, answered and closed.

A hand-written reader like the metrics endpoint's (``pion.server.metrics``) rather than a web
framework: the page asks for a handful of JSON documents every few seconds, and every answer
reads server state, which only the event loop may touch. Limits keep a slow or hostile client
from holding anything: the head must arrive within ``REQUEST_TIMEOUT`` and fit ``MAX_HEAD``.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, unquote

MAX_HEAD = 8192
MAX_BODY = 4096
REQUEST_TIMEOUT = 5.0

#: what every answer carries: no framing by other sites, no guessing of types, scripts and
#: styles only from the page's own files (the page has no inline script)
SECURITY_HEADERS = (
    ("X-Content-Type-Options", "nosniff"),
    ("X-Frame-Options", "DENY"),
    ("Referrer-Policy", "no-referrer"),
    ("Content-Security-Policy", "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                                "connect-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'"),
)


class BadRequest(Exception):
    """A request that cannot be read: answered with ``status`` and closed."""

    def __init__(self, status: str, text: str) -> None:
        super().__init__(text)
        self.status = status


@dataclass(slots=True)
class Request:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: bytes
    peer: str

    def cookie(self, name: str) -> str | None:
        for part in self.headers.get("cookie", "").split(";"):
            key, _, value = part.strip().partition("=")
            if key == name:
                return value
        return None

    def json(self) -> Any:
        """The body as JSON (the login form sends ``application/json``: a cross-site form cannot)."""
        if not self.headers.get("content-type", "").lower().startswith("application/json"):
            raise BadRequest("415 Unsupported Media Type", "send application/json")
        try:
            return json.loads(self.body or b"null")
        except (ValueError, UnicodeDecodeError):
            raise BadRequest("400 Bad Request", "the body is not JSON") from None


@dataclass(slots=True)
class Response:
    status: str
    body: bytes
    kind: str = "application/json"
    headers: list[tuple[str, str]] = field(default_factory=list)

    def encode(self) -> bytes:
        lines = [f"HTTP/1.1 {self.status}", f"Content-Type: {self.kind}", f"Content-Length: {len(self.body)}",
                 "Cache-Control: no-store", "Connection: close"]
        lines += [f"{name}: {value}" for name, value in (*SECURITY_HEADERS, *self.headers)]
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + self.body


def json_response(value: Any, status: str = "200 OK", headers: list[tuple[str, str]] | None = None) -> Response:
    body = json.dumps(value, separators=(",", ":"), allow_nan=False).encode()
    return Response(status, body, "application/json", headers or [])


def error(status: str, text: str) -> Response:
    return json_response({"error": text}, status)


async def read_request(reader: asyncio.StreamReader, peer: str) -> Request:
    """One request's head and body; raises ``BadRequest``."""
    try:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), REQUEST_TIMEOUT)
    except asyncio.LimitOverrunError:
        raise BadRequest("431 Request Header Fields Too Large", "request too large") from None
    except (TimeoutError, asyncio.IncompleteReadError, ConnectionError):
        raise BadRequest("400 Bad Request", "bad request") from None
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split()
    if len(parts) != 3 or not parts[2].startswith("HTTP/"):
        raise BadRequest("400 Bad Request", "bad request line")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if line:
            name, sep, value = line.partition(":")
            if not sep:
                raise BadRequest("400 Bad Request", "bad header line")
            headers[name.strip().lower()] = value.strip()
    body = b""
    length_text = headers.get("content-length", "0")
    if not length_text.isdigit():
        raise BadRequest("400 Bad Request", "bad Content-Length")
    length = int(length_text)
    if length > MAX_BODY:
        raise BadRequest("413 Content Too Large", f"the body may be at most {MAX_BODY} bytes")
    if "transfer-encoding" in headers:
        raise BadRequest("411 Length Required", "send Content-Length, not a chunked body")
    if length:
        try:
            body = await asyncio.wait_for(reader.readexactly(length), REQUEST_TIMEOUT)
        except (TimeoutError, asyncio.IncompleteReadError, ConnectionError):
            raise BadRequest("400 Bad Request", "the body did not arrive") from None
    target = parts[1]
    path, _, raw_query = target.partition("?")
    query = {key: values[-1] for key, values in parse_qs(raw_query, keep_blank_values=True).items()}
    return Request(parts[0].upper(), unquote(path), query, headers, body, peer)
