"""``PionClient``: typed methods for Pion's own commands, on redis-py.

redis-py carries the connection (pooling, TLS, auth, RESP parsing with hiredis); this class adds
the argument order and reply shapes of ``V.*``, ``KV.PREFIX.*``, ``SSM.PREFIX.*`` and
``PION.STATS`` (spec sections 4, 5, 7, 10), numpy in and out, and Pion's exception classes.
Every standard Redis command stays reachable through ``client.redis``.

URLs: ``pion://[user:password@]host[:1974][/db]`` (plain TCP, default port 1974),
``pions://`` (TLS, default port 1974), and redis-py's ``redis://``, ``rediss://``, ``unix://``.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Iterable, Sequence

import numpy as np

from pion.client import fastread
from pion.client.blocks import check_root
from pion.client.errors import CorruptReply, translate
from pion.client.rows import decode_rows, wire_rows

DEFAULT_URL = "pion://127.0.0.1:1974"
DEFAULT_PORT = 1974
_SCHEMES = {"pion": "redis", "pions": "rediss"}


def redis_url(url: str) -> str:
    """A Pion URL in the form redis-py understands (``pion://`` -> ``redis://``, port 1974 by default)."""
    parts = urllib.parse.urlsplit(url)
    scheme = _SCHEMES.get(parts.scheme)
    if scheme is None:
        if parts.scheme not in ("redis", "rediss", "unix"):
            raise ValueError(f"unsupported URL scheme {parts.scheme!r} (want pion, pions, redis, rediss or unix)")
        return url
    netloc = parts.netloc
    if parts.port is None:
        netloc = f"{netloc}:{DEFAULT_PORT}" if parts.hostname else f"{netloc}127.0.0.1:{DEFAULT_PORT}"
    return urllib.parse.urlunsplit((scheme, netloc, parts.path, parts.query, parts.fragment))


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes | bytearray) else str(value)


def _info_dict(raw) -> dict[str, str | int]:
    """``key:value`` lines (KV.PREFIX.INFO, V.INFO) as a dict, numbers as int."""
    out: dict[str, str | int] = {}
    for line in _text(raw).splitlines():
        key, sep, value = line.partition(":")
        if sep:
            out[key.strip()] = int(value) if value.strip().lstrip("-").isdigit() else value.strip()
    return out


def zero_copy_requests(client) -> None:
    """Send large arguments as they are, not copied into one request buffer.

    redis-py packs a command with hiredis when it is installed, which copies every argument into
    one ``bytes``: for the 94 MB of a 2,048-token prefix store that is ~80-110 ms of client CPU
    (measured: 0.107 s median against 0.020 s with this packer, same server). redis-py's own
    Python packer keeps arguments over 6,000 bytes (and memoryviews) as separate buffers that
    go to the socket as they are; small commands cost it a few microseconds more."""
    from redis.connection import PythonRespSerializer

    pool = client.connection_pool
    pool.connection_kwargs.setdefault("command_packer", PythonRespSerializer(6000, pool.get_encoder().encode))


class PionClient:
    """A connection (pool) to one Pion server. Thread-safe as redis-py's ``Redis`` is."""

    def __init__(self, url: str = DEFAULT_URL, *, socket_timeout: float = 60.0, **redis_kwargs) -> None:
        import redis

        self.url = url
        redis_kwargs.setdefault("socket_read_size", 1 << 20)
        self.redis = redis.Redis.from_url(redis_url(url), socket_timeout=socket_timeout, **redis_kwargs)
        zero_copy_requests(self.redis)

    def close(self) -> None:
        self.redis.close()

    def __enter__(self) -> PionClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def execute(self, *args):
        """Run one command; error replies raise Pion's exception classes."""
        try:
            return self.redis.execute_command(*args)
        except Exception as exc:
            raise translate(exc) from exc

    def pipeline_execute(self, commands: Iterable[Sequence], *, fast: bool = False) -> list:
        """Send many commands in one round trip; an error reply is returned in its slot, not raised.

        ``fast``: read the replies with ``pion.client.fastread`` (bulk strings land in writable
        ``bytearray``s without intermediate copies): for the large K/V replies of a hit.
        """
        if fast:
            return fastread.pipeline(self.redis, list(commands))
        try:
            pipe = self.redis.pipeline(transaction=False)
            for command in commands:
                pipe.execute_command(*command)
            replies = pipe.execute(raise_on_error=False)
        except Exception as exc:
            raise translate(exc) from exc
        return [translate(r) if isinstance(r, Exception) else r for r in replies]

    def ping(self) -> bool:
        return self.execute("PING") in (True, b"PONG", "PONG")

    # -- V.* -------------------------------------------------------------------------------

    def v_create(self, sid: str | bytes, value_dim: int, vquant: str | None = None) -> int:
        """``V.CREATE sid value_dim [VQUANT fmt]`` -> session index."""
        args = ["V.CREATE", sid, value_dim] + (["VQUANT", vquant] if vquant else [])
        return int(self.execute(*args))

    def v_create_schema(self, sid: str | bytes, specs: Sequence[str], default_dim: int = 0) -> int:
        """``V.CREATE sid default_dim SCHEMA N spec...``; a spec is ``fmt=<name>,dim=<n>[,rope=<n>]``."""
        return int(self.execute("V.CREATE", sid, default_dim, "SCHEMA", len(specs), *specs))

    def v_storebatch(self, sid: str | bytes, layer: int, start: int, rows: np.ndarray) -> None:
        """``V.STOREBATCH sid layer start count blob [FMT F16]``: fp16 rows go as F16, others as fp32."""
        blob, fmt = wire_rows(np.asarray(rows).reshape(len(rows), -1))
        self.execute("V.STOREBATCH", sid, layer, start, len(rows), blob, *(["FMT", fmt] if fmt else []))

    def v_fetch(self, sid: str | bytes, layer: int, ids: Sequence[int]) -> np.ndarray | None:
        """``V.FETCH sid layer id...`` -> float32 ``(len(ids), dim)`` (rows never stored are zeros)."""
        raw = self.execute("V.FETCH", sid, layer, *ids)
        return None if raw is None else np.frombuffer(raw, "<f4").reshape(len(ids), -1)

    def v_fetch_range(self, sid: str | bytes, layer: int, start: int, end: int, *, fmt: str = "F32",
                      codec: str | None = None, dim: int | None = None):
        """``V.FETCH sid layer RANGE start end [FMT NATIVE|RAW]``.

        ``fmt="F32"`` -> float32 rows; ``"RAW"`` with ``codec`` and ``dim`` -> decoded rows,
        without them -> the encoded bytes; ``"NATIVE"`` -> the bytes as the server sends them.
        """
        args = ["V.FETCH", sid, layer, "RANGE", start, end] + ([] if fmt.upper() == "F32" else ["FMT", fmt])
        raw = self.execute(*args)
        return self._rows(raw, end - start, fmt, codec, dim)

    def v_fetch_batch(self, sid: str | bytes, start: int, end: int, num_layers: int | None = None, *,
                      fmt: str = "F32", codecs: Sequence[str] | None = None,
                      dims: Sequence[int] | None = None) -> list | None:
        """``V.FETCH sid BATCH start end [num_layers] [FMT ...]`` -> one entry per layer (None if empty)."""
        args = ["V.FETCH", sid, "BATCH", start, end] + ([num_layers] if num_layers is not None else [])
        args += [] if fmt.upper() == "F32" else ["FMT", fmt]
        raw = self.execute(*args)
        if raw is None:
            return None
        return [self._rows(item, end - start, fmt, codecs[i] if codecs else None, dims[i] if dims else None)
                for i, item in enumerate(raw)]

    @staticmethod
    def _rows(raw, count: int, fmt: str, codec: str | None, dim: int | None):
        if raw is None:
            return None
        if fmt.upper() == "F32":
            if len(raw) % (4 * count):
                raise CorruptReply(f"{len(raw)} bytes is not {count} float32 rows")
            return np.frombuffer(raw, "<f4").reshape(count, -1)
        if fmt.upper() == "RAW" and codec is not None and dim is not None:
            try:
                return decode_rows(raw, codec, count, dim)
            except ValueError as exc:
                raise CorruptReply(str(exc)) from None
        return raw

    def v_info(self, sid: str | bytes | None = None) -> dict:
        return _info_dict(self.execute("V.INFO", *([sid] if sid is not None else [])))

    def v_snapshot(self, sid: str | bytes) -> int:
        return int(self.execute("V.SNAPSHOT", sid))

    def v_restore(self, sid: str | bytes, snap_id: int) -> None:
        self.execute("V.RESTORE", sid, snap_id)

    def v_commit(self, sid: str | bytes, snap_id: int) -> bool:
        return bool(self.execute("V.COMMIT", sid, snap_id))

    # -- KV.PREFIX.* -------------------------------------------------------------------------

    @staticmethod
    def register_args(ns, kv_dim: int, vquant: str, *, blocks: tuple[int, bytes] | None = None,
                      prefill_ms: float | None = None, manifest: bytes | None = None,
                      chain: tuple[int, bytes] | None = None, seed: bytes | None = None,
                      stage: str | bytes | None = None, replace: bool = False) -> list:
        """The argv of ``KV.PREFIX.REGISTER`` (also used inside pipelines).

        ``seed`` (16 bytes, e.g. ``blocks.chain_seed(model fingerprint)``) seeds the CHAIN's hashes;
        MATCH must then send ``blocks.block_hashes(tokens, B, seed)``. ``stage`` opens a staged
        store (needed with ``manifest``): write with ``TOKEN stage``, then ``KV.PREFIX.PUBLISH``;
        ``replace`` lets the publish overwrite another prefix.
        """
        args = ["KV.PREFIX.REGISTER", ns, kv_dim, vquant]
        if blocks is not None:
            block_size, blob = blocks
            args += ["BLOCKS", block_size, len(blob) // 8, blob]
        if prefill_ms is not None:
            args += ["PREFILL_MS", max(0, round(prefill_ms))]
        if chain is not None:
            block_size, token_blob = chain
            args += ["CHAIN", block_size, token_blob]
            if seed is not None:
                args += ["SEED", check_root(seed)]
        elif seed is not None:
            raise ValueError("seed needs chain")
        if manifest is not None:
            args += ["MANIFEST", manifest]
        if stage is not None:
            args += ["STAGE", stage] + (["REPLACE"] if replace else [])
        elif replace:
            raise ValueError("replace needs stage")
        return args

    def kv_register(self, ns, kv_dim: int, vquant: str, **options) -> None:
        """``KV.PREFIX.REGISTER ns kv_dim vquant [BLOCKS ...] [PREFILL_MS ms] [CHAIN ... [SEED s]] [MANIFEST json]``."""
        self.execute(*self.register_args(ns, kv_dim, vquant, **options))

    def kv_lookup(self, ns, tokens: int | None = None, prefill_ms: float | None = None) -> bool:
        """``KV.PREFIX.LOOKUP ns [TOKENS n] [PREFILL_MS ms]`` -> True on HIT."""
        args = ["KV.PREFIX.LOOKUP", ns]
        args += ["TOKENS", tokens] if tokens is not None else []
        args += ["PREFILL_MS", max(0, round(prefill_ms))] if prefill_ms is not None else []
        return _text(self.execute(*args)).upper() == "HIT"

    def kv_drop(self, *namespaces) -> int:
        return int(self.execute("KV.PREFIX.DROP", *namespaces))

    def kv_info(self) -> dict:
        return _info_dict(self.execute("KV.PREFIX.INFO"))

    def kv_save(self, path: str | None = None) -> None:
        self.execute("KV.PREFIX.SAVE", *([path] if path else []))

    def kv_commit(self) -> None:
        self.execute("KV.PREFIX.COMMIT")

    def kv_owner(self, ns) -> str:
        return _text(self.execute("KV.PREFIX.OWNER", ns))

    def kv_blocks(self, ns) -> tuple[int, np.ndarray] | None:
        """``KV.PREFIX.BLOCKS ns`` -> ``(block_size, u64 hashes)`` or None (UNKNOWN)."""
        raw = self.execute("KV.PREFIX.BLOCKS", ns)
        if not isinstance(raw, bytes | bytearray) or raw == b"UNKNOWN":
            return None
        head = np.frombuffer(raw[:8], "<u4")
        return int(head[0]), np.frombuffer(raw[8:], "<u8")

    def kv_membership(self, ns, hashes: Sequence[int]) -> list[bool] | None:
        """``KV.PREFIX.MEMBERSHIP ns count blob`` -> one bool per probe hash, None if UNKNOWN."""
        blob = np.asarray(hashes, dtype="<u8").tobytes()
        raw = self.execute("KV.PREFIX.MEMBERSHIP", ns, len(hashes), blob)
        if raw == b"UNKNOWN":
            return None
        bits = np.unpackbits(np.frombuffer(raw, np.uint8), bitorder="little")[: len(hashes)]
        return [bool(b) for b in bits]

    def kv_match(self, block_size: int, hash_blob: bytes, tokens: bytes | None = None) -> tuple[str, int] | None:
        """``KV.PREFIX.MATCH block_size hash_blob [TOKENS token_blob]`` -> ``(namespace, blocks)`` or None.

        With ``tokens`` (u32 LE ids) the server also compares the stored token ids.
        """
        args = ["KV.PREFIX.MATCH", block_size, hash_blob] + (["TOKENS", tokens] if tokens is not None else [])
        return parse_match(self.execute(*args))

    def kv_match_tokens(self, block_size: int, hash_blob: bytes, tokens: bytes,
                        seed: bytes | None = None) -> tuple[str, int, int, int, int] | None:
        """``KV.PREFIX.MATCH ... TOKENS t [SEED s] WITHTOKENS`` -> ``(namespace, tokens held, its
        block size, tokens it stores, its generation)`` or None: the stored prefix holding the
        most leading tokens of the request."""
        args = ["KV.PREFIX.MATCH", block_size, hash_blob, "TOKENS", tokens]
        args += (["SEED", check_root(seed)] if seed is not None else []) + ["WITHTOKENS"]
        raw = self.execute(*args)
        if not isinstance(raw, list | tuple) or len(raw) != 6:
            raise CorruptReply(f"unexpected KV.PREFIX.MATCH WITHTOKENS reply {raw!r}")
        ns, _, held, size, stored, generation = raw
        if ns is None or int(held) <= 0:
            return None
        return _text(ns), int(held), int(size), int(stored), int(generation)

    def kv_publish(self, ns, token) -> None:
        """``KV.PREFIX.PUBLISH ns token``: make a complete staged store readable."""
        self.execute("KV.PREFIX.PUBLISH", ns, token)

    def kv_abort(self, ns, token) -> bool:
        """``KV.PREFIX.ABORT ns token``: discard a staged store; True if it was open."""
        return bool(self.execute("KV.PREFIX.ABORT", ns, token))

    def kv_manifest(self, ns) -> bytes | None:
        """``KV.PREFIX.MANIFEST ns`` -> the manifest bytes the prefix was registered with, or None."""
        return self.execute("KV.PREFIX.MANIFEST", ns)

    # -- SSM.PREFIX.* ------------------------------------------------------------------------

    def ssm_store(self, sid, layer: int, blob: bytes) -> None:
        self.execute("SSM.PREFIX.STORE", sid, layer, blob)

    def ssm_fetch(self, sid, layer: int) -> bytes | None:
        return self.execute("SSM.PREFIX.FETCH", sid, layer)

    def ssm_drop(self, sid, layer: int | None = None) -> None:
        self.execute("SSM.PREFIX.DROP", sid, *([layer] if layer is not None else []))

    # -- PION.STATS --------------------------------------------------------------------------

    def stats(self) -> dict[str, int | float]:
        """``PION.STATS`` as a dict (RESP2 flat array or RESP3 map); the seconds fields as float."""
        return parse_stats(self.execute("PION.STATS"))

    def stats_reset(self) -> None:
        self.execute("PION.STATS", "RESET")


def parse_stats(raw) -> dict[str, int | float]:
    items = list(raw.items()) if isinstance(raw, dict) else list(zip(raw[::2], raw[1::2], strict=True))
    out: dict[str, int | float] = {}
    for key, value in items:
        text = _text(value)
        out[_text(key)] = value if isinstance(value, int) else float(text) if "." in text else int(text)
    return out


def parse_match(raw) -> tuple[str, int] | None:
    """A MATCH reply: nil / empty for no match, else ``[ns, blocks]``."""
    if raw is None or raw == [] or raw == b"":
        return None
    if isinstance(raw, list | tuple) and len(raw) >= 2:
        ns, blocks = raw[0], int(raw[1])
        return (None if ns is None or blocks <= 0 else (_text(ns), blocks))
    raise CorruptReply(f"unexpected KV.PREFIX.MATCH reply {raw!r}")
