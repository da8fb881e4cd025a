"""``Stage2Wire``: the ``ATTEND.PREFIX.*`` commands with numpy in and out, counted.

Tensors go as the reference lays them out: queries ``[H_q, M, D]``, stored prefixes and live
suffixes ``[H, N, D]``, all float32. Every call counts one round trip and its bytes both ways
(``counters``), so a runtime integration can report what Stage 2 cost. A ``-COLDMISS`` raises
``ColdMiss``; with ``rehydrate=(ns, H, D)`` the call sends ``KV.PREFIX.WARM`` and retries once.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from pion.client.client import PionClient, _info_dict, _text
from pion.client.errors import ColdMiss, CorruptReply


def f32(array) -> np.ndarray:
    return np.ascontiguousarray(array, dtype=np.float32)


class Stage2Wire:
    """Stage-2 commands on one ``PionClient``; ``counters`` holds round trips and bytes."""

    def __init__(self, client: PionClient) -> None:
        self.client = client
        self.counters: Counter[str] = Counter()

    def _call(self, args: list, rehydrate: tuple | None = None):
        sent = sum(len(a) for a in args if isinstance(a, bytes | bytearray | memoryview))
        for attempt in (0, 1):
            self.counters["round_trips"] += 1
            self.counters["bytes_sent"] += sent
            try:
                reply = self.client.execute(*args)
            except ColdMiss:
                if rehydrate is None or attempt:
                    raise
                self.counters["cold_rehydrates"] += 1
                self.warm(*rehydrate, attend_sid=args[1])
                continue
            self.counters["bytes_received"] += len(reply) if isinstance(reply, bytes | bytearray) else 0
            return reply
        raise AssertionError("unreachable")

    @staticmethod
    def _tail(fa_window: int | None, selector: int | None, origin: str | bytes | None, scale: float | None) -> list:
        tail: list = []
        if fa_window is not None or selector is not None:
            tail.append(-1 if fa_window is None else fa_window)
        if selector is not None:
            tail.append(selector)
        if origin is not None:
            tail += ["FROM", origin]
        if scale is not None:
            tail += ["SCALE", repr(float(scale))]
        return tail

    # -- storing and the tier -------------------------------------------------------------------

    def store(self, sid, layer: int, k: np.ndarray, v: np.ndarray) -> None:
        """``ATTEND.PREFIX.STORE sid layer H N D K V`` from ``[H, N, D]`` arrays."""
        heads, n, dim = k.shape
        self._call(["ATTEND.PREFIX.STORE", sid, layer, heads, n, dim, f32(k).tobytes(), f32(v).tobytes()])

    def lookup(self, sid, layer: int) -> str:
        """``+HIT`` (warm), ``+COLD`` or ``+MISS``, as ``"HIT"``/``"COLD"``/``"MISS"``."""
        return _text(self._call(["ATTEND.PREFIX.LOOKUP", sid, layer]))

    def warm(self, ns, heads: int, dim: int, attend_sid=None) -> str:
        """``KV.PREFIX.WARM ns H D [attend_sid]``: the reply text (``"<layers> [skipped_dim=k]"``)."""
        return _text(self._call(["KV.PREFIX.WARM", ns, heads, dim, *([attend_sid] if attend_sid is not None else [])]))

    def info(self) -> dict:
        return _info_dict(self._call(["ATTEND.PREFIX.INFO"]))

    # -- queries --------------------------------------------------------------------------------

    def query(self, sid, layer: int, q: np.ndarray, *, top_k: int | None = None, fa_window: int | None = None,
              origin=None, scale: float | None = None, rehydrate: tuple | None = None):
        """``ATTEND.PREFIX.QUERY``: ``(out [H, M, D], lse [H, M] or None for M=1)``; top_k defaults to dense."""
        heads, rows, dim = q.shape
        top = top_k if top_k is not None else 1 << 40
        raw = self._call(["ATTEND.PREFIX.QUERY", sid, layer, heads, dim, top, f32(q).tobytes(),
                          *self._tail(fa_window, None, origin, scale)], rehydrate)
        body = heads * rows * dim * 4
        if len(raw) != body + (heads * rows * 4 if rows > 1 else 0):
            raise CorruptReply(f"ATTEND.PREFIX.QUERY replied {len(raw)} bytes for H={heads} M={rows} D={dim}")
        out = np.frombuffer(raw, "<f4", count=heads * rows * dim).reshape(heads, rows, dim)
        lse = np.frombuffer(raw, "<f4", offset=body).reshape(heads, rows) if rows > 1 else None
        return out, lse

    def query_fused(self, sid, layer: int, q: np.ndarray, k_suf: np.ndarray, v_suf: np.ndarray, *,
                    head_map: np.ndarray | None = None, fa_window: int | None = None, origin=None,
                    scale: float | None = None, rehydrate: tuple | None = None) -> np.ndarray:
        """``ATTEND.PREFIX.QUERY_FUSED``: one softmax over the prefix and the causal suffix; ``[H_q, M, D]``."""
        q_heads, rows, dim = q.shape
        kv_heads, suffix, _ = k_suf.shape
        raw = self._call(["ATTEND.PREFIX.QUERY_FUSED", sid, layer, q_heads, dim, suffix, kv_heads, f32(q).tobytes(),
                          f32(k_suf).tobytes(), f32(v_suf).tobytes(), _map_bytes(head_map),
                          *self._tail(fa_window, None, origin, scale)], rehydrate)
        return _out(raw, q_heads, rows, dim)

    def query_sparse(self, sid, layer: int, q: np.ndarray, indices: list, *, fa_window: int | None = None,
                     origin=None, scale: float | None = None) -> np.ndarray:
        """``ATTEND.PREFIX.QUERY_SPARSE``: head h attends token ids ``indices[h]``; ``q [H, 1, D]``."""
        heads, _, dim = q.shape
        k_max = max(1, max(len(ids) for ids in indices))
        table = np.zeros((heads, k_max), "<i4")
        for h, ids in enumerate(indices):
            table[h, :len(ids)] = ids
        counts = np.array([len(ids) for ids in indices], "<u4")
        raw = self._call(["ATTEND.PREFIX.QUERY_SPARSE", sid, layer, heads, dim, k_max, f32(q).tobytes(),
                          table.tobytes(), counts.tobytes(), *self._tail(fa_window, None, origin, scale)])
        return _out(raw, heads, 1, dim)

    def query_sparse_auto(self, sid, layer: int, q: np.ndarray, *, block: int, k_top: int, kv_heads: int,
                          selector: int = 0, head_map: np.ndarray | None = None, k_suf: np.ndarray | None = None,
                          v_suf: np.ndarray | None = None, fa_window: int | None = None, origin=None,
                          scale: float | None = None, rehydrate: tuple | None = None) -> np.ndarray:
        """``QUERY_SPARSE_AUTO`` (or ``_FUSED`` with a suffix): the server picks the blocks; ``[H_q, 1, D]``."""
        q_heads, _, dim = q.shape
        tail = self._tail(fa_window, selector, origin, scale)
        if k_suf is None:
            args = ["ATTEND.PREFIX.QUERY_SPARSE_AUTO", sid, layer, q_heads, dim, block, k_top, kv_heads,
                    f32(q).tobytes(), _map_bytes(head_map), *tail]
        else:
            args = ["ATTEND.PREFIX.QUERY_SPARSE_AUTO_FUSED", sid, layer, q_heads, dim, block, k_top, kv_heads,
                    k_suf.shape[1], f32(q).tobytes(), f32(k_suf).tobytes(), f32(v_suf).tobytes(),
                    _map_bytes(head_map), *tail]
        return _out(self._call(args, rehydrate), q_heads, 1, dim)


def _map_bytes(head_map: np.ndarray | None) -> bytes:
    return b"" if head_map is None else np.asarray(head_map, np.uint8).tobytes()


def _out(raw, heads: int, rows: int, dim: int) -> np.ndarray:
    if len(raw) != heads * rows * dim * 4:
        raise CorruptReply(f"an ATTEND.PREFIX reply of {len(raw)} bytes for H={heads} M={rows} D={dim}")
    return np.frombuffer(raw, "<f4").reshape(heads, rows, dim)
