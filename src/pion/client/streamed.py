"""A socket-lane hit read layer by layer, while the runtime already computes on the first layers.

Why: a client on another host receives every layer's K/V rows (47 MB for a 2,048-token fp16
prefix of SmolLM2-135M) before the suffix's forward starts, so its time to first token is the
transfer *plus* the forward. The fetch pipeline's replies arrive in order, so nothing forces
that wait: ``StreamedFetch`` asks for the rows interleaved (K0, V0, K1, V1, ...), reads the
replies in a thread straight into buffers allocated before they arrive (``recv_into``, no
``bytes`` object in between), and says per layer when its rows are in. The runtime's cache
(``TransformersAdapter.streamed_cache``) waits in its per-layer update for that layer only, so
layer L's rows cross the socket while layer L-1 of the suffix runs. This is LMCache's layer-wise
pipelining (docs/client.md), on one pipeline of Redis commands.

What it does not give up: the pipeline still opens and closes with ``KV.PREFIX.GENERATION``
(``pion.client.transfer``), but the forward runs before the closing one is read. So the caller
keeps the forward's result only when ``finish()`` says every reply came from one entry, and
otherwise throws it away and computes the prefix itself (``PionPromptCache.forward``): a
concurrent replace during the stream is a miss and a recompute, never a cache or logits mixed
from two prefixes.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Sequence

import numpy as np

from pion.client.errors import CorruptReply, PionConnectionError, PionError, PionTimeoutError
from pion.client.fastread import RespReader
from pion.client.rows import bytes_per_row


class StreamBroken(Exception):
    """The stream cannot give a layer (the entry was dropped, a reply was an error, the
    connection broke): the forward running on it is abandoned and the prefix computed instead."""


class StreamedFetch:
    """One exact prefix's fetch pipeline, read in a background thread, layer by layer.

    Replies, in order: LOOKUP, GENERATION, MANIFEST, then ``V.FETCH <ns>_pk l RANGE 0 n FMT RAW``
    and the same for ``_pv``, per layer, then GENERATION again. ``head()`` waits for the first
    three; ``layer(i)`` for layer i's two row replies (the buffers they were received into);
    ``finish()`` for the rest, and says whether every reply came from one registry entry.
    """

    def __init__(self, redis_client, ns: str, n_tokens: int, layout, schema: dict, spare: int = 0) -> None:
        self.n_layers = len(layout.attn)
        pk, pv = f"{ns}_pk", f"{ns}_pv"
        self.commands: list[Sequence] = [["KV.PREFIX.LOOKUP", ns], ["KV.PREFIX.GENERATION", ns],
                                         ["KV.PREFIX.MANIFEST", ns]]
        #: the destinations, allocated before any row arrives (uninitialised: no zero-fill pass),
        #: each with room for ``spare`` more rows (the suffix's, written after the prefix's rows:
        #: for a codec in the model's dtype the buffer then *is* the layer's tensor, no copy)
        self.buffers: list[tuple[np.ndarray, np.ndarray]] = []
        self._full: list[tuple[np.ndarray, np.ndarray]] = []
        for layer in range(self.n_layers):
            self.commands += [["V.FETCH", pk, layer, "RANGE", 0, n_tokens, "FMT", "RAW"],
                              ["V.FETCH", pv, layer, "RANGE", 0, n_tokens, "FMT", "RAW"]]
            rows = (bytes_per_row(schema["k"][layer], layout.k_dims[layer]),
                    bytes_per_row(schema["v"][layer], layout.v_dims[layer]))
            k_full, v_full = (np.empty((n_tokens + spare) * row, np.uint8) for row in rows)
            self._full.append((k_full, v_full))
            self.buffers.append((k_full[:n_tokens * rows[0]], v_full[:n_tokens * rows[1]]) if spare else (k_full, v_full))
        self.commands.append(["KV.PREFIX.GENERATION", ns])
        self._replies: list = []
        self._ready = threading.Condition()
        self._error: BaseException | None = None
        self._done = False
        self.nbytes = 0
        import redis

        pool = redis_client.connection_pool
        try:
            self._conn = pool.get_connection()
        except (redis.exceptions.RedisError, OSError) as exc:
            raise PionConnectionError(str(exc)) from exc
        self._pool = pool
        try:
            self._send(self._conn)
        except BaseException as exc:
            self._conn.disconnect()
            pool.release(self._conn)
            raise PionConnectionError(f"sending the fetch failed: {exc}") from exc
        self._thread = threading.Thread(target=self._read_all, name="pion-stream", daemon=True)
        self._thread.start()

    def _send(self, conn) -> None:
        """The whole pipeline in one write (a test splits it to let another client in between)."""
        conn.send_packed_command(conn.pack_commands(self.commands))

    # -- the reading thread ------------------------------------------------------------------

    def _read_all(self) -> None:
        import redis

        sock = self._conn._sock
        timeout = sock.gettimeout()
        plain = type(sock) is socket.socket  # TLS sockets take no recv flags: chunked receives there
        reader = RespReader(sock, waitall=plain)
        try:
            # blocking, with the timeout kept by the kernel (SO_RCVTIMEO): each layer's payload is
            # then one MSG_WAITALL recv, which holds no GIL while the forward runs in the caller
            if plain:
                sock.settimeout(None)
            if plain and timeout:
                import struct

                seconds = int(timeout)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO,
                                struct.pack("ll", seconds, int((timeout - seconds) * 1e6)))
            for index in range(len(self.commands)):
                row = index - 3
                into = self.buffers[row // 2][row % 2] if 0 <= row < 2 * self.n_layers else None
                reply = reader.read(into=into)
                with self._ready:
                    self._replies.append(reply)
                    self._ready.notify_all()
            if reader.leftover:
                raise CorruptReply(f"{reader.leftover} bytes after the last reply")
            if plain:
                self._restore(sock, timeout)
            self._pool.release(self._conn)
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting caller
            self._conn.disconnect()
            self._pool.release(self._conn)
            if isinstance(exc, TimeoutError | BlockingIOError | redis.exceptions.TimeoutError):  # SO_RCVTIMEO: EAGAIN
                exc = PionTimeoutError(f"timeout reading a streamed reply: {exc}")
            elif isinstance(exc, OSError | redis.exceptions.ConnectionError):
                exc = PionConnectionError(f"connection lost reading a streamed reply: {exc}")
            with self._ready:
                self._error = exc
                self._ready.notify_all()
        finally:
            with self._ready:
                self._done = True
                self._ready.notify_all()

    @staticmethod
    def _restore(sock, timeout) -> None:
        """The socket as redis-py set it (its own timeout; no kernel receive timeout)."""
        import struct

        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, struct.pack("ll", 0, 0))
        sock.settimeout(timeout)

    def _wait(self, count: int) -> list:
        """The first ``count`` replies, waiting for them; raises what broke the stream."""
        with self._ready:
            while len(self._replies) < count and self._error is None:
                self._ready.wait()
            if len(self._replies) < count:
                raise self._error if isinstance(self._error, PionError) else PionConnectionError(str(self._error))
            return self._replies[:count]

    # -- the caller's side ------------------------------------------------------------------

    def head(self) -> tuple[object, object, object]:
        """``(LOOKUP's reply, the first generation, the manifest)``."""
        hit, generation, manifest = self._wait(3)
        return hit, generation, manifest

    def layer(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        """Layer ``index``'s K and V rows as received (``FMT RAW`` bytes), once both are in: the
        whole buffers, the ``spare`` rows after them not written."""
        replies = self._wait(3 + 2 * index + 2)
        pair = replies[3 + 2 * index], replies[4 + 2 * index]
        expected = self.buffers[index]
        for got, want in zip(pair, expected, strict=True):
            if got is not want:  # an error or nil reply (dropped, evicted), or rows of another size
                raise StreamBroken(f"layer {index}: {got if isinstance(got, PionError) else 'not the rows asked'}")
        return self._full[index]

    def finish(self) -> bool:
        """Wait for every reply; did they all come from one entry, with every row there?"""
        from pion.client.transfer import one_entry

        try:
            replies = self._wait(len(self.commands))
        except PionError:
            return False
        finally:
            self._thread.join()
        rows = replies[3:-1]
        if any(got is not want for got, want in zip(rows, (b for pair in self.buffers for b in pair), strict=True)):
            return False
        self.nbytes = sum(len(b) for b in rows)
        try:
            return one_entry(replies[1], replies[-1])
        except PionError:
            return False

    def close(self) -> None:
        """Let the thread read what is left (the connection goes back to the pool clean)."""
        self._thread.join()
