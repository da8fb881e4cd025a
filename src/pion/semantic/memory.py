"""Agent memory (AI.MEMORY): what an agent said or learnt, per session, found again by meaning.

A memory is a hash ``__pion:mem:<id>`` of the client's database with the raw ``session``,
``role``, ``content``, ``meta`` (JSON), ``created``/``updated`` (ms) and the vector ``v``; the hidden
FLAT index ``__pion:memory`` indexes ``content`` (BM25), the vector, ``created`` and tag tokens.
Tag fields hold SHA-1 tokens of the values (``token``), not the values: session names, users and
topics may contain commas, spaces or capitals, and a token matches exactly that string.

Deduplication: a memory whose normalised content (case-folded, whitespace collapsed) equals one
already stored for the same session, role, namespace and user (``user_id``) is not stored again; the existing one's
``updated`` time is refreshed instead (recency), and its id is the answer. ``DEDUP sim``
additionally treats a memory at least ``sim`` similar to a stored one of the session as a
duplicate (off by default: "phone 555-1234" and "phone 555-1235" are 0.98 similar).

Recall scores (all in 0..1): relevance is the cosine similarity (clipped at 0), or with
``HYBRID alpha`` the reference's RRF fusion ``(1-alpha)/(60+rank_vector) + alpha/(60+rank_bm25)``
scaled by 61 (so 1 is first in both lists); the final score is
``(1-w)*relevance + w*0.5**(age/halflife)`` with recency weight ``w`` (default 0.1) and half-life
(default 30 days) on the ``updated`` time.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pion.semantic.owned import OwnedIndex, allowed_docs, field_int, field_text, nearest, vector_blob

INDEX_NAME = "__pion:memory"
PREFIX = b"__pion:mem:"
ALL_SESSIONS = "*"
ID_PATTERN = re.compile(r"[A-Za-z0-9_.:\-]{1,128}\Z")
DEFAULT_RECENCY = 0.1
DEFAULT_HALFLIFE = 30 * 86400.0
RRF_K = 60
_TAGS = ("s", "r", "h", "ns", "u", "t", "e", "k")
_WORD = re.compile(r"\w+", re.UNICODE)


def create_argv(dim: int) -> list[bytes]:
    fields = [b"content", b"TEXT"]
    for name in _TAGS:
        fields += [name.encode(), b"TAG", b"CASESENSITIVE"]
    fields += [b"created", b"NUMERIC", b"SORTABLE", b"event", b"NUMERIC",
               b"v", b"VECTOR", b"FLAT", b"6", b"TYPE", b"FLOAT32", b"DIM", str(dim).encode(),
               b"DISTANCE_METRIC", b"COSINE"]
    return [b"FT.CREATE", INDEX_NAME.encode(), b"ON", b"HASH", b"PREFIX", b"1", PREFIX, b"SCHEMA", *fields]


OWNED = OwnedIndex(INDEX_NAME, PREFIX, b"__pion:memory", create_argv, "agent memory")


def token(value: str) -> str:
    """A tag token for an exact string (any characters, any case)."""
    return hashlib.sha1(value.encode("utf-8", "surrogatepass")).hexdigest()[:20]


def normalized(content: str) -> str:
    return " ".join(content.casefold().split())


def content_hash(session: str, role: str, namespace: str, content: str, user: str = "") -> str:
    parts = (session, role, namespace, normalized(content)) + ((user,) if user else ())
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:32]


def new_id(now_ms: int) -> str:
    """Time-ordered and unique: 13 hex digits of milliseconds, then 8 random ones."""
    return f"{now_ms:013x}{os.urandom(4).hex()}"


@dataclass
class Meta:
    """What META's JSON object may say that the index can filter on; the object is kept whole."""

    raw: dict[str, Any] = field(default_factory=dict)

    @property
    def namespace(self) -> str:
        return str(self.raw.get("namespace") or "")

    @property
    def user(self) -> str:
        return str(self.raw.get("user_id") or "")

    @property
    def kind(self) -> str:
        return str(self.raw.get("memory_type") or "")

    def items(self, name: str) -> list[str]:
        value = self.raw.get(name) or []
        return [str(v) for v in value] if isinstance(value, list) else [str(value)]

    def event_ms(self) -> int | None:
        value = self.raw.get("event_date")
        if value is None or value == "":
            return None
        if isinstance(value, int | float):
            return int(value)
        from datetime import datetime

        try:
            return int(datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp() * 1000)
        except ValueError:
            raise ValueError(f"META event_date must be epoch milliseconds or an ISO 8601 time, got {value!r}") from None


def parse_meta(raw: bytes | None) -> Meta:
    if raw is None or not bytes(raw).strip():
        return Meta()
    try:
        value = json.loads(bytes(raw))
    except ValueError as exc:
        raise ValueError(f"META must be a JSON object: {exc}") from None
    if not isinstance(value, dict):
        raise ValueError("META must be a JSON object")
    meta = Meta(value)
    meta.event_ms()  # refuse a bad date now, not at indexing time
    return meta


@dataclass
class NewMemory:
    session: str
    role: str
    content: str
    meta: Meta
    memory_id: str | None = None


def memory_fields(item: NewMemory, memory_id: str, vector: np.ndarray, now_ms: int) -> list[bytes]:
    """The HSET field/value list of a new memory."""
    meta = item.meta
    out = [b"session", item.session.encode(), b"role", item.role.encode(), b"content", item.content.encode(),
           b"id", memory_id.encode(), b"created", str(now_ms).encode(), b"updated", str(now_ms).encode(),
           b"s", token(item.session).encode(), b"r", token(item.role).encode(),
           b"h", content_hash(item.session, item.role, meta.namespace, item.content, meta.user).encode(),
           b"v", vector_blob(vector)]
    if meta.raw:
        out += [b"meta", json.dumps(meta.raw, separators=(",", ":"), ensure_ascii=False).encode()]
    for name, value in ((b"ns", meta.namespace), (b"u", meta.user), (b"k", meta.kind)):
        if value:
            out += [name, token(value).encode()]
    for name, key in ((b"t", "topics"), (b"e", "entities")):
        values = meta.items(key)
        if values:
            out += [name, ",".join(token(v) for v in values).encode()]
    event = meta.event_ms()
    if event is not None:
        out += [b"event", str(event).encode()]
    return out


def find_duplicate(index: Any, item: NewMemory, vector: np.ndarray, dedup_sim: float | None) -> int | None:
    """The doc id of a stored duplicate of ``item`` (exact normalised content; or, with
    ``dedup_sim``, a memory of the session at least that similar), else None."""
    digest = content_hash(item.session, item.role, item.meta.namespace, item.content, item.meta.user)
    same = index.tags["h"].values.get(digest)
    if same:
        return min(same)
    if dedup_sim is not None:
        allowed = allowed_docs(index, [("s", [token(item.session)], False)])
        best = nearest(index, vector, 1, allowed)
        if best and best[0][1] >= dedup_sim:
            return best[0][0]
    return None


@dataclass
class RecallQuery:
    session: str
    text: str
    k: int = 5
    alpha: float = 0.0
    threshold: float | None = None
    recency: float = DEFAULT_RECENCY
    halflife: float = DEFAULT_HALFLIFE
    offset: int = 0
    roles: list[str] = field(default_factory=list)
    namespace: str | None = None
    user: str | None = None
    kinds: list[str] = field(default_factory=list)
    topics: list[str] = field(default_factory=list)
    entities: list[str] = field(default_factory=list)
    since: int | None = None
    until: int | None = None


def filter_docs(index: Any, query: RecallQuery) -> np.ndarray | None:
    filters: list[tuple[str, list[str], bool]] = []
    if query.session != ALL_SESSIONS:
        filters.append(("s", [token(query.session)], False))
    for name, values in (("r", query.roles), ("k", query.kinds), ("t", query.topics), ("e", query.entities)):
        if values:
            filters.append((name, [token(v) for v in values], False))
    for name, value in (("ns", query.namespace), ("u", query.user)):
        if value is not None:
            filters.append((name, [token(value)], False))
    allowed = allowed_docs(index, filters)
    if query.since is not None or query.until is not None:
        lo = -math.inf if query.since is None else float(query.since)
        hi = math.inf if query.until is None else float(query.until)
        window = index.numerics["created"].range(lo, hi, False, False)
        base = set(index.docs) if allowed is None else set(allowed.tolist())
        chosen = sorted(base & window)
        allowed = np.asarray(chosen, dtype=np.int64)
    return allowed


def keyword_ranking(index: Any, text: str, allowed: np.ndarray | None, limit: int) -> list[int]:
    """Doc ids by BM25 over ``content`` for the words of ``text`` (any of them), best first.

    The ranking FT.SEARCH gives ``@content:(w1|w2|...)`` under BM25STD (each word's own postings,
    its ``+stem``'s and its bare stem's, the union summing them, ties by doc id), computed here
    with numpy over the postings and restricted to ``allowed`` before ranking: the query engine scored and sorted
    every matching document in Python and only then filtered (600 ms at 10,000 memories sharing
    a word)."""
    from pion.vector import scoring
    from pion.vector import text as text_mod

    words = [w for w in dict.fromkeys(_WORD.findall(text.casefold())) if len(w) > 1][:64]
    if not words or limit <= 0:
        return []
    definition = index.definition
    stopwords = definition.stopword_set
    postings = index.text.postings
    doc_len = index.text.doc_len
    total = len(index.docs)
    avg = index.avg_doc_len
    size = index.next_doc
    scores = np.zeros(size, dtype=np.float64)
    hit = np.zeros(size, dtype=bool)
    k1, k1_plus_1, b = scoring.K1, scoring.K1_PLUS_1, scoring.BM25STD_B  # the query engine's own constants
    for word in words:
        if word in stopwords:
            continue
        lists = [postings.get(word)]
        root = text_mod.stem(word, definition.language)
        lists.append(postings.get(text_mod.STEM_PREFIX + (root or word)))
        if root and root != word:  # the bare stem too, as the query engine expands a word
            lists.append(postings.get(root))
        for plist in lists:
            if not plist:
                continue
            n = len(plist)
            docs = np.fromiter(plist.keys(), dtype=np.int64, count=n)
            freq = np.fromiter((p.freq for p in plist.values()), dtype=np.float64, count=n)
            lengths = np.fromiter((doc_len.get(d, 0) for d in plist), dtype=np.float64, count=n)
            norm = lengths / avg if avg else np.zeros(n)
            contribution = scoring.idf_bm25(total, n) * freq * k1_plus_1 / (freq + k1 * (1.0 - b + b * norm))
            np.add.at(scores, docs, contribution)
            hit[docs] = True
    if allowed is not None:
        keep = np.zeros(size, dtype=bool)
        inside = allowed[(allowed >= 0) & (allowed < size)]
        keep[inside] = True
        hit &= keep
    cand = np.flatnonzero(hit)
    if not len(cand):
        return []
    order = np.lexsort((cand, -scores[cand]))  # best score first, then the lower doc id
    return cand[order[:limit]].tolist()


def recall(index: Any, query: RecallQuery, vector: np.ndarray, values: Any, now_ms: int | None = None) -> list[dict]:
    """The best ``k`` memories for ``query`` (after ``offset``), as reply maps, best first."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    allowed = filter_docs(index, query)
    pool = max(4 * (query.k + query.offset), 20)
    by_vector = nearest(index, vector, pool, allowed)
    relevance: dict[int, float] = {}
    if query.alpha > 0:
        by_words = keyword_ranking(index, query.text, allowed, pool)
        for rank, (doc, _) in enumerate(by_vector, 1):
            relevance[doc] = (1 - query.alpha) / (RRF_K + rank)
        for rank, doc in enumerate(by_words, 1):
            relevance[doc] = relevance.get(doc, 0.0) + query.alpha / (RRF_K + rank)
        relevance = {doc: score * (RRF_K + 1) for doc, score in relevance.items()}
    else:
        relevance = {doc: max(sim, 0.0) for doc, sim in by_vector}
    rows = []
    for doc, rel in relevance.items():
        key = index.docs.get(doc)
        fields = getattr(values(key), "fields", None) if key is not None else None
        if fields is None:
            continue
        sim = _similarity(fields, vector)
        if query.threshold is not None and sim < query.threshold:
            continue
        age = max(0.0, (now - field_int(fields, b"updated", now)) / 1000.0)
        fresh = 0.5 ** (age / query.halflife) if query.halflife > 0 else 1.0
        score = (1 - query.recency) * rel + query.recency * fresh
        rows.append((score, doc, sim, fields))
    rows.sort(key=lambda r: (-r[0], -r[1]))
    return [reply_map(fields, score=score, similarity=sim) for score, _, sim, fields in
            rows[query.offset:query.offset + query.k]]


def _similarity(fields: dict, vector: np.ndarray) -> float:
    raw = fields.get(b"v")
    if raw is None or len(raw) != vector.size * 4:
        return 0.0
    return round(float(np.frombuffer(bytes(raw), dtype="<f4") @ vector), 6)


def reply_map(fields: dict, score: float | None = None, similarity: float | None = None) -> dict[bytes, Any]:
    out: dict[bytes, Any] = {
        b"id": field_text(fields, b"id").encode(),
        b"session": bytes(fields.get(b"session", b"")),
        b"role": bytes(fields.get(b"role", b"")),
        b"content": bytes(fields.get(b"content", b"")),
    }
    if score is not None:
        out[b"score"] = round(score, 6)
    if similarity is not None:
        out[b"similarity"] = round(similarity, 6)
    out[b"created"] = field_int(fields, b"created")
    out[b"updated"] = field_int(fields, b"updated")
    out[b"meta"] = bytes(fields.get(b"meta", b"{}"))
    return out


def session_docs(index: Any, session: str) -> list[int]:
    """The session's doc ids, newest first (by ``created``, then insertion order)."""
    allowed = allowed_docs(index, [("s", [token(session)], False)])
    docs = [] if allowed is None else allowed.tolist()
    created = index.sortables.get("created", {})
    return sorted(docs, key=lambda d: (created.get(d, 0), d), reverse=True)
