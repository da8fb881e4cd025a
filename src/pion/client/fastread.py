"""Reading large RESP replies straight into their own buffers, on a redis-py connection.

Why: a warm prompt-cache hit moves tens of megabytes of K/V rows. Through redis-py every bulk
string is received in ``socket_read_size`` chunks, copied into hiredis's buffer, then copied
again into a read-only ``bytes``, which the runtime must copy once more to get writable
tensors. Here each bulk payload is received with ``recv_into`` directly into a ``bytearray``
of its exact size (a ``bytearray``, or from 1 MiB on an uninitialised ``uint8`` numpy array, so
no zero-fill pass either): one copy (the kernel's), and the arrays built on it are writable, so
a transformers cache can use them without another copy.

Only the reply parsing is ours: redis-py still owns the connection (pool, TLS, auth, timeouts)
and sends the commands. The connection comes from the pool after redis-py checked it holds no
unread data; any error mid-reply disconnects it, so a half-read reply can never be parsed as
the next command's.
"""

from __future__ import annotations

import socket
from collections.abc import Sequence

import numpy as np

from pion.client.errors import CorruptReply, PionConnectionError, PionTimeoutError, classify

_CHUNK = 1 << 16
#: bulk strings from this size on are returned as uint8 numpy arrays (buffer protocol, len(), bytes())
_LARGE = 1 << 20


class Status(str):
    """A simple-string reply (``+OK``, ``+HIT``)."""


class RespReader:
    """RESP2/RESP3 replies from a socket; error replies come back as exception instances."""

    def __init__(self, sock: socket.socket, waitall: bool = False) -> None:
        self.sock = sock
        self.buf = bytearray()
        self.pos = 0
        #: receive each large payload with one ``MSG_WAITALL`` call (the socket must be blocking):
        #: a reader thread then takes the GIL once per payload, not once per chunk
        self.flags = socket.MSG_WAITALL if waitall and hasattr(socket, "MSG_WAITALL") else 0

    def _fill(self) -> None:
        if self.pos:
            del self.buf[: self.pos]
            self.pos = 0
        chunk = self.sock.recv(_CHUNK)
        if not chunk:
            raise PionConnectionError("the server closed the connection")
        self.buf += chunk

    def _line(self) -> bytes:
        while True:
            end = self.buf.find(b"\r\n", self.pos)
            if end >= 0:
                line = bytes(self.buf[self.pos:end])
                self.pos = end + 2
                return line
            self._fill()

    def _bulk(self, size: int, out=None):
        # large payloads land in uninitialised numpy memory: no zero-fill pass over megabytes
        if out is None:
            out = np.empty(size, np.uint8) if size >= _LARGE else bytearray(size)
        have = min(size, len(self.buf) - self.pos)
        out[:have] = np.frombuffer(self.buf, np.uint8, have, self.pos) if have and isinstance(out, np.ndarray) else \
            self.buf[self.pos:self.pos + have]
        self.pos += have
        view = memoryview(out)
        while have < size:
            got = self.sock.recv_into(view[have:], size - have, self.flags)
            if not got:
                raise PionConnectionError("the server closed the connection mid-reply")
            have += got
        while len(self.buf) - self.pos < 2:
            self._fill()
        if self.buf[self.pos:self.pos + 2] != b"\r\n":
            raise CorruptReply("bulk string not terminated by CRLF")
        self.pos += 2
        return out

    def read(self, into: np.ndarray | None = None):
        """One reply; an error reply is returned as a Pion exception instance (not raised).

        ``into``: a preallocated uint8 array; a bulk string of exactly its size is received into
        it and it is returned (any other reply is read as usual, so the caller sees the difference)."""
        line = self._line()
        kind, rest = line[:1], line[1:]
        if kind == b"$":
            size = int(rest)
            if into is not None and size == len(into):
                return self._bulk(size, into)
            return None if size < 0 else self._bulk(size)
        if kind == b"*":
            count = int(rest)
            return None if count < 0 else [self.read() for _ in range(count)]
        if kind == b"+":
            return Status(rest.decode("utf-8", "replace"))
        if kind == b":":
            return int(rest)
        if kind == b"-":
            return classify(rest.decode("utf-8", "replace"))
        return self._resp3(kind, rest)

    def _resp3(self, kind: bytes, rest: bytes):
        """The RESP3 types (redis-py 8 negotiates RESP3 by default)."""
        if kind == b"_":
            return None
        if kind == b"#":
            return rest == b"t"
        if kind == b",":
            return float(rest)
        if kind == b"(":
            return int(rest)
        if kind in (b"~", b">"):
            return [self.read() for _ in range(int(rest))]
        if kind == b"%":
            return {_key(self.read()): self.read() for _ in range(int(rest))}
        if kind == b"=":
            return self._bulk(int(rest))[4:]  # "txt:" + text
        if kind == b"!":
            return classify(bytes(self._bulk(int(rest))).decode("utf-8", "replace"))
        if kind == b"|":  # attributes precede the reply they describe
            for _ in range(2 * int(rest)):
                self.read()
            return self.read()
        raise CorruptReply(f"unexpected reply type {kind!r}")

    @property
    def leftover(self) -> int:
        return len(self.buf) - self.pos


def _key(value):
    return bytes(value) if isinstance(value, bytearray) else value


def pipeline(redis_client, commands: Sequence[Sequence], retries: int = 1) -> list:
    """Send ``commands`` in one write and read every reply; error replies come back as exceptions.

    A connection that breaks (not one that times out) is retried ``retries`` times on a fresh
    one, as redis-py retries its own commands: callers send read-only commands only.
    """
    for attempt in range(retries + 1):
        try:
            return _pipeline_once(redis_client, commands)
        except PionTimeoutError:
            raise
        except PionConnectionError:
            if attempt == retries:
                raise
    raise AssertionError("unreachable")


def _pipeline_once(redis_client, commands: Sequence[Sequence]) -> list:
    import redis

    pool = redis_client.connection_pool
    try:
        conn = pool.get_connection()
    except (redis.exceptions.RedisError, OSError) as exc:
        raise PionConnectionError(str(exc)) from exc
    try:
        conn.send_packed_command(conn.pack_commands(commands))
        reader = RespReader(conn._sock)
        replies = [reader.read() for _ in commands]
        if reader.leftover:
            raise CorruptReply(f"{reader.leftover} bytes after the last reply")
        return replies
    except (TimeoutError, redis.exceptions.TimeoutError) as exc:
        conn.disconnect()
        raise PionTimeoutError(f"timeout reading a reply: {exc}") from exc
    except (OSError, redis.exceptions.ConnectionError) as exc:
        conn.disconnect()
        raise PionConnectionError(f"connection lost reading a reply: {exc}") from exc
    except BaseException:
        conn.disconnect()
        raise
    finally:
        pool.release(conn)
