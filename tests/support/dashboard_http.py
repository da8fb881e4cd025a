"""A plain HTTP client of the dashboard's JSON, holding its session cookie as a browser would."""

from __future__ import annotations

import http.client
import json
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: Any
    raw: bytes


@dataclass
class Dash:
    port: int
    host: str = "127.0.0.1"
    cookie: str | None = None
    sent_host: str | None = None
    set_cookies: list[str] = field(default_factory=list)

    def request(self, method: str, path: str, body: Any = None, content_type: str = "application/json",
                headers: dict[str, str] | None = None) -> Reply:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=30)
        try:
            sent = dict(headers or {})
            if self.sent_host is not None:
                sent["Host"] = self.sent_host
            if self.cookie:
                sent["Cookie"] = f"pion_dashboard={self.cookie}"
            data = None
            if body is not None:
                data = body if isinstance(body, bytes) else json.dumps(body).encode()
                sent["Content-Type"] = content_type
            conn.request(method, path, body=data, headers=sent)
            response = conn.getresponse()
            raw = response.read()
            got = {k.lower(): v for k, v in response.getheaders()}
            for name, value in response.getheaders():
                if name.lower() == "set-cookie":
                    self.set_cookies.append(value)
                    cookie = value.split(";", 1)[0].partition("=")[2]
                    self.cookie = cookie or None
            try:
                parsed = json.loads(raw) if got.get("content-type", "").startswith("application/json") else None
            except ValueError:
                parsed = None
            return Reply(response.status, got, parsed, raw)
        finally:
            conn.close()

    def get(self, path: str) -> Reply:
        return self.request("GET", path)

    def login(self, user: str, password: str) -> Reply:
        return self.request("POST", "/api/login", {"user": user, "password": password})
