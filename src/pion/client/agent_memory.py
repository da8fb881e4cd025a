"""``PionMemory``: the client side of AI.MEMORY (agent memory kept and embedded by the server).

Texts go in and come out; the server embeds them (no model or API key in the client), stores
each memory as a durable document of the caller's database (tenant) and searches it by meaning,
optionally fused with BM25 (``alpha``) and weighted by recency. Replies come back as plain dicts
with ``str`` values (``meta`` parsed from JSON, times in epoch milliseconds).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pion.client.client import DEFAULT_URL, redis_url
from pion.client.errors import translate


def connect(url: str = DEFAULT_URL, *, username: str | None = None, password: str | None = None,
            socket_timeout: float = 120.0, **redis_kwargs: Any):
    """A redis-py client for a Pion URL (``pion://[user:pass@]host[:port][/db]``, ``pions://`` for TLS,
    redis-py's ``ssl_*`` query parameters for certificates), speaking RESP3. A broken connection
    (the server restarted) is retried once on a fresh one; a timeout is not (a slow first
    embedding is not a lost connection, and the command must not run twice)."""
    import redis
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    extra = {k: v for k, v in (("username", username), ("password", password)) if v}
    retry = Retry(NoBackoff(), 1, supported_errors=(redis.exceptions.ConnectionError,))
    return redis.Redis.from_url(redis_url(url), protocol=3, socket_timeout=socket_timeout, retry=retry,
                                **extra, **redis_kwargs)


def _text(value: Any) -> Any:
    return value.decode("utf-8", "replace") if isinstance(value, bytes | bytearray) else value


def parse_record(raw: Any) -> dict[str, Any] | None:
    """One RECALL/GET reply map (RESP3 dict or RESP2 flat list) as a dict of str -> str/int/float."""
    if raw is None:
        return None
    if isinstance(raw, list):
        raw = dict(zip(raw[::2], raw[1::2], strict=True))
    out = {_text(k): _text(v) for k, v in raw.items()}
    for name in ("created", "updated"):
        if name in out:
            out[name] = int(out[name])
    for name in ("score", "similarity"):
        if name in out:
            out[name] = float(out[name])
    try:
        out["meta"] = json.loads(out.get("meta") or "{}")
    except ValueError:
        out["meta"] = {}
    return out


def _csv(values: Iterable[str] | str | None) -> str | None:
    if values is None:
        return None
    return values if isinstance(values, str) else ",".join(values)


class PionMemory:
    """AI.MEMORY through a redis-py client (``connect``'s, or your own)."""

    def __init__(self, client: Any = None, url: str = DEFAULT_URL) -> None:
        self.redis = client if client is not None else connect(url)

    def _call(self, *args: Any) -> Any:
        try:
            return self.redis.execute_command(*args)
        except Exception as exc:
            raise translate(exc) from exc

    def add(self, session: str, role: str, content: str, meta: Mapping[str, Any] | None = None, *,
            memory_id: str | None = None, dedup: float | None = None) -> str:
        """Remember one memory; its id (a duplicate answers the stored one's id)."""
        args: list[Any] = ["AI.MEMORY", "ADD", session, role, content]
        if meta:
            args += ["META", json.dumps(dict(meta))]
        if memory_id is not None:
            args += ["ID", memory_id]
        if dedup is not None:
            args += ["DEDUP", repr(float(dedup))]
        return _text(self._call(*args, "WITHID"))

    def add_many(self, items: Sequence[tuple[str, str, str, Mapping[str, Any] | None]]) -> list[str]:
        """Remember ``(session, role, content, meta)`` items, embedded as one batch; their ids.
        A ``meta["id"]`` sets the id (the memory is then replaced, never deduplicated)."""
        if not items:
            return []
        args: list[Any] = ["AI.MEMORY", "ADDMANY"]
        for session, role, content, meta in items:
            args += [session, role, content, json.dumps(dict(meta)) if meta else ""]
        return [_text(i) for i in self._call(*args)]

    def recall(self, session: str, query: str, k: int = 5, *, alpha: float = 0.0, threshold: float | None = None,
               recency: float | None = None, halflife: float | None = None, offset: int = 0,
               roles: Iterable[str] | None = None, namespace: str | None = None, user: str | None = None,
               kinds: Iterable[str] | None = None, topics: Iterable[str] | None = None,
               entities: Iterable[str] | None = None, since: int | None = None, until: int | None = None
               ) -> list[dict[str, Any]]:
        """The ``k`` best memories of ``session`` (``"*"``: every session) for ``query``, best first."""
        args: list[Any] = ["AI.MEMORY", "RECALL", session, query, "K", k]
        options = {"HYBRID": alpha or None, "THRESHOLD": threshold, "RECENCY": recency, "HALFLIFE": halflife,
                   "OFFSET": offset or None, "ROLE": _csv(roles), "NAMESPACE": namespace, "USER": user,
                   "KIND": _csv(kinds), "TOPICS": _csv(topics), "ENTITIES": _csv(entities), "SINCE": since,
                   "UNTIL": until}
        for name, value in options.items():
            if value is not None:
                args += [name, repr(value) if isinstance(value, float) else value]
        return [parse_record(row) for row in self._call(*args)]  # type: ignore[misc]

    def context(self, session: str, n: int) -> list[str]:
        return [_text(line) for line in self._call("AI.MEMORY", "CONTEXT", session, n)]

    def get(self, *memory_ids: str) -> list[dict[str, Any] | None]:
        return [parse_record(row) for row in self._call("AI.MEMORY", "GET", *memory_ids)] if memory_ids else []

    def forget(self, *memory_ids: str) -> int:
        return int(self._call("AI.MEMORY", "FORGET", *memory_ids)) if memory_ids else 0

    def forget_session(self, session: str) -> int:
        return int(self._call("AI.MEMORY", "FORGET_SESSION", session))

    def stats(self) -> dict[str, Any]:
        raw = self._call("AI.MEMORY", "STATS")
        if isinstance(raw, list):
            raw = dict(zip(raw[::2], raw[1::2], strict=True))
        return {_text(k): _text(v) for k, v in raw.items()}
