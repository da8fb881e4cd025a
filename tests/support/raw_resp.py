"""A minimal RESP client over a plain socket: commands encoded in advance, replies parsed by hand.

Why: a benchmark that compares a served command with a library in-process wants the server's
share without a client library's per-call cost (redis-py spends tens of microseconds per
command in Python on this machine, as much as the server's whole VSIM); ``tools/`` and
``benchmarks/`` use it. RESP2 and the RESP3 types these benchmarks meet: simple strings, errors
(raised), integers, booleans, nulls, doubles, bulk strings, arrays, maps (as flat lists)."""

from __future__ import annotations

import socket


def encode(*args: bytes | str | int) -> bytes:
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        b = a if isinstance(a, bytes) else str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(b), b))
    return b"".join(out)


class RawClient:
    def __init__(self, port: int, host: str = "127.0.0.1", timeout: float = 600.0) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = bytearray()
        self.pos = 0

    def close(self) -> None:
        self.sock.close()

    def call(self, payload: bytes):
        """Send one encoded command and return its reply."""
        self.sock.sendall(payload)
        return self.read()

    def pipeline(self, payloads: list[bytes]) -> list:
        """Send them all at once, then read one reply each."""
        self.sock.sendall(b"".join(payloads))
        return [self.read() for _ in payloads]

    def _fill(self) -> None:
        chunk = self.sock.recv(1 << 16)
        if not chunk:
            raise ConnectionError("the server closed the connection")
        if self.pos:
            del self.buf[: self.pos]
            self.pos = 0
        self.buf.extend(chunk)

    def _line(self) -> bytes:
        while True:
            end = self.buf.find(b"\r\n", self.pos)
            if end >= 0:
                line = bytes(self.buf[self.pos:end])
                self.pos = end + 2
                return line
            self._fill()

    def read(self):
        line = self._line()
        kind, rest = line[:1], line[1:]
        if kind in (b"+", b","):
            return rest
        if kind == b"-":
            raise RuntimeError(rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b"#":
            return rest == b"t"
        if kind == b"_":
            return None
        if kind == b"$":
            n = int(rest)
            if n < 0:
                return None
            while len(self.buf) - self.pos < n + 2:
                self._fill()
            value = bytes(self.buf[self.pos:self.pos + n])
            self.pos += n + 2
            return value
        if kind in (b"*", b"%", b"~"):
            n = int(rest)
            if n < 0:
                return None
            return [self.read() for _ in range(n * (2 if kind == b"%" else 1))]
        raise ValueError(f"unexpected reply line {line[:40]!r}")
