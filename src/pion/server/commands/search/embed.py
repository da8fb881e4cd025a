"""Vector fields the server computes from text (``FT.CREATE ... v VECTOR ... EMBED body``) and
FT.SEARCHTEXT, the reference's search by text (the query is embedded by the server).

A client stores and searches text alone: a document of such an index that has the text field
but no vector gets one shortly after it is indexed. ``AutoEmbedder`` watches every index with
EMBED fields: after each write (a key hook schedules it) it looks at the documents indexed since
it last looked (doc ids only grow, and a rewritten document gets a new one), embeds the texts of
those without a vector in one batch off the event loop, then writes each vector into its hash
with HSET, logged like any write, so it is durable and never computed twice. A document whose
text changed meanwhile is left for the next round; one that cannot be embedded (the model is
missing, its width is not the field's DIM) counts in FT.INFO's ``hash_indexing_failures`` with
the reason in ``Index Errors``. Until its vector is written a document answers text queries but
not KNN ones (as RediSearch treats a document without the vector field).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from typing import Any

import numpy as np

from pion.embedding.providers import EmbeddingError
from pion.protocol.errors import ReplyError
from pion.server.commands.ai.embed import embedder_of, text_of, with_vectors
from pion.server.commands.search.admin import engine as search_engine
from pion.server.commands.search.query import _sort_loader
from pion.server.commands.search.replies import search_reply
from pion.server.component import Component
from pion.server.context import Ctx
from pion.server.net.client import Client
from pion.server.registry import command
from pion.storage.hash_value import HashValue
from pion.vector import search

log = logging.getLogger("pion.embedding")

#: texts embedded per round (one batch for the model)
BATCH = 128


class AutoEmbedder:
    def __init__(self, server: Any) -> None:
        self.server = server
        #: (db id, index name) -> the highest doc id already looked at
        self.watermarks: dict[tuple[int, str], int] = {}
        self.queue: deque[tuple[int, str, int]] = deque()
        self.busy = False
        self.scheduled = False
        self.stats = {"embedded": 0, "failed": 0, "rounds": 0}
        self._client = Client(0, server)
        self._client.authenticated = True
        self._client.ctx = Ctx(self._client, server)

    # -- finding work (event loop) --------------------------------------------------------------

    def _embed_indexes(self) -> list[tuple[Any, Any]]:
        eng = self.server.parts.search
        if eng is None:
            return []
        return [(key, index) for key, index in eng.indexes.items()
                if any(spec.embed_from for spec in index.definition.fields)]

    def key_changed(self, db: Any, key: bytes) -> None:
        if self.scheduled:
            return
        eng = self.server.parts.search
        if eng is not None and eng.indexes and self._embed_indexes():  # no index: no list made per write
            self.scheduled = True
            try:
                asyncio.get_running_loop().call_soon(self.tick)
            except RuntimeError:
                self.scheduled = False

    def tick(self) -> None:
        """Collect newly indexed documents and start one round if none is running."""
        self.scheduled = False
        indexes = self._embed_indexes()
        if not indexes or self.server.loading:
            return
        self.server.parts.search.catch_up()
        for (db_id, name), index in indexes:
            mark = self.watermarks.get((db_id, name), 0)
            fresh = []
            for doc in reversed(index.docs):
                if doc <= mark:
                    break
                fresh.append(doc)
            if fresh:
                self.watermarks[(db_id, name)] = fresh[0]
                self.queue.extend((db_id, name, doc) for doc in reversed(fresh))
        if not self.busy and self.queue:
            self._start_round()

    def _database(self, db_id: int) -> tuple[list, Any, str | None] | None:
        for tenant, dbs in [(None, self.server.dbs), *self.server.tenant_dbs.items()]:
            for db in dbs:
                if db.id == db_id:
                    return dbs, db, tenant
        return None

    def _needs_vector(self, db_id: int, name: str, doc: int) -> list[tuple]:
        """(db id, index, key, field, text) for each EMBED field of the document whose vector is
        missing or was computed from another text (its marker says which); text None: the text
        is gone, so is the vector it was made from."""
        eng = self.server.parts.search
        index = eng.indexes.get((db_id, name))
        found = self._database(db_id)
        key = index.docs.get(doc) if index is not None else None
        if key is None or found is None:
            return []
        value = eng.values(found[1], key)
        if value.__class__ is not HashValue:
            return []
        return [(db_id, name, key, spec, _text(index, spec, value)) for spec in index.definition.fields
                if spec.embed_from and _stale(index, spec, value)]

    def _start_round(self) -> None:
        work: list[tuple] = []
        while self.queue and len(work) < BATCH:
            for item in self._needs_vector(*self.queue.popleft()):
                if item[4] is None:
                    self._write(item, None)
                else:
                    work.append(item)
        if not work:
            return
        try:
            embedder = self.server.parts.embedding
        except KeyError:
            return
        texts = [raw.decode("utf-8", "replace") for *_, raw in work]
        scopes = {self._scope(item[0]) for item in work}
        scope = scopes.pop() if len(scopes) == 1 else b""
        self.busy = True
        loop = asyncio.get_running_loop()
        future = loop.run_in_executor(embedder.wait_pool, embedder.embed, texts, scope)
        future.add_done_callback(lambda done: self._finish_round(work, done))

    def _scope(self, db_id: int) -> bytes:
        found = self._database(db_id)
        return found[2].encode() if found is not None and found[2] else b""

    # -- writing the vectors (event loop) -------------------------------------------------------

    def _finish_round(self, work: list[tuple], done: asyncio.Future) -> None:
        self.busy = False
        self.stats["rounds"] += 1
        try:
            vectors = done.result()
        except Exception as exc:
            reason = str(exc) if isinstance(exc, EmbeddingError) else f"{exc.__class__.__name__}: {exc}"
            for item in work:
                self._failed(item, f"EMBED: {reason}")
        else:
            for item, vector in zip(work, vectors, strict=True):
                self._write(item, vector)
        if self.queue:
            self._start_round()

    def _write(self, item: tuple, vector: np.ndarray | None) -> None:
        db_id, name, key, spec, text = item
        if vector is not None and vector.shape[0] != spec.vector.dim:
            self._failed(item, f"EMBED: the server's embedding model makes {vector.shape[0]}-dim vectors "
                               f"but field {spec.name} has DIM {spec.vector.dim}")
            return
        found = self._database(db_id)
        index = self.server.parts.search.indexes.get((db_id, name))
        if found is None or index is None:
            return
        dbs, db, tenant = found
        value = self.server.parts.search.values(db, key)
        if value.__class__ is not HashValue or _text(index, spec, value) != text or not _stale(index, spec, value):
            return  # changed meanwhile: its next indexing brings it back if it still needs a vector
        field, marker = spec.identifier.encode(), _marker(spec)
        if vector is None:
            argv = [b"HDEL", key, field, marker]
        else:
            argv = [b"HSET", key, field, np.asarray(vector, dtype="<f4").tobytes(), marker, _digest(text)]
        client = self._client
        client.dbs, client.db_index, client.tenant = dbs, db.index, tenant
        dispatcher = self.server.dispatcher
        reply = dispatcher.call(client, dispatcher.lookup(argv), argv)
        if isinstance(reply, ReplyError):
            self._failed(item, f"EMBED: {reply.message}")
        elif vector is not None:
            self.stats["embedded"] += 1

    def _failed(self, item: tuple, reason: str) -> None:
        db_id, name, key, _, _ = item
        index = self.server.parts.search.indexes.get((db_id, name))
        self.stats["failed"] += 1
        if index is not None:
            index.failures += 1
            index.last_failure = reason
            index.last_failure_key = key

    def info(self) -> dict[str, int]:
        return {f"embedding_auto_{k}": v for k, v in self.stats.items()} | {"embedding_auto_queued": len(self.queue)}


def _marker(spec: Any) -> bytes:
    """The hash field that records which text a computed vector was made from (its SHA-1)."""
    return b"__pion_embed:" + spec.identifier.encode()


def _digest(text: bytes) -> bytes:
    import hashlib

    return hashlib.sha1(text).hexdigest().encode()


def _text(index: Any, spec: Any, value: HashValue) -> bytes | None:
    raw = value.fields.get(_source_identifier(index, spec.embed_from).encode())
    return bytes(raw) if raw else None


def _stale(index: Any, spec: Any, value: HashValue) -> bool:
    """Does this field need (re)computing? Missing with a text; or computed by us (marked) from
    another text, or from a text that is gone. A vector the client wrote itself is left alone."""
    fields = value.fields
    text = _text(index, spec, value)
    marker = fields.get(_marker(spec))
    if spec.identifier.encode() not in fields:
        return text is not None
    return marker is not None and (text is None or bytes(marker) != _digest(text))


def _source_identifier(index: Any, source: str | None) -> str:
    """EMBED names an attribute (its hash field) or a hash field directly."""
    spec = index.definition.field(source) if index is not None and source else None
    return spec.identifier if spec is not None else (source or "")


def install(server: Any) -> AutoEmbedder:
    auto = AutoEmbedder(server)
    server.parts.auto_embed = auto
    server.key_hooks.append(auto.key_changed)
    server.add_component(AutoEmbedPart(auto))
    return auto


class AutoEmbedPart(Component):
    """The auto-embedder's cron (scans of FT.CREATE and restarts signal no keys) and its counts in
    INFO ``# Embedding`` (where the embedder answers one)."""

    name = "auto-embed"
    info_extends = ("embedding",)

    def __init__(self, auto: AutoEmbedder) -> None:
        self.auto = auto

    def cron(self) -> None:
        self.auto.tick()

    def info_extra(self, section: str) -> dict[str, Any]:
        return self.auto.info()


# -- FT.SEARCHTEXT ---------------------------------------------------------------------------------


def _embed_field(index: Any, wanted: str | None) -> Any:
    fields = [spec for spec in index.definition.fields if spec.embed_from]
    if wanted is not None:
        fields = [spec for spec in fields if spec.name == wanted]
        if not fields:
            raise ReplyError(f"ERR `{wanted}` is not an EMBED vector field of index `{index.name}`")
    if not fields:
        raise ReplyError(f"ERR index `{index.name}` has no EMBED vector field (declare one with "
                         "`... VECTOR FLAT 6 TYPE FLOAT32 DIM d DISTANCE_METRIC COSINE EMBED textfield`)")
    return fields[0]


def _searchtext_args(argv: list[bytes]) -> tuple[int, str, str | None, list[bytes]]:
    k, prefilter, field, extra = 10, "*", None, []
    i = 3
    while i < len(argv):
        word = bytes(argv[i]).upper()
        if word in (b"K", b"FILTER", b"FIELD") and i + 1 < len(argv):
            value = bytes(argv[i + 1])
            if word == b"K":
                if not value.isdigit() or not 1 <= int(value) <= 10000:
                    raise ReplyError("ERR K must be between 1 and 10000")
                k = int(value)
            elif word == b"FILTER":
                prefilter = "(" + text_of(value, "filter") + ")"
            else:
                field = text_of(value, "field")
            i += 2
        elif word == b"RETURN" and i + 1 < len(argv) and bytes(argv[i + 1]).isdigit():
            count = int(argv[i + 1])
            extra += list(argv[i:i + 2 + count])
            i += 2 + count
        else:
            raise ReplyError(f"ERR unknown FT.SEARCHTEXT argument `{bytes(argv[i]).decode('utf-8', 'replace')}`")
    return k, prefilter, field, extra


@command("FT.SEARCHTEXT", -3, "readonly noscript no_multi", categories="@read @search @slow", group="search",
         since="0.1.0")
def ft_searchtext(ctx: Ctx, argv: list[bytes]):
    """FT.SEARCHTEXT index query [K k] [FILTER query] [FIELD vector_field] [RETURN n field ...]: the k
    documents nearest to the query's embedding (FT.SEARCH's reply, nearest first, with the
    ``__<field>_score`` distance)."""
    name = text_of(argv[1], "index name")
    index = search_engine(ctx).get(ctx.db, name, search_error=True)
    k, prefilter, wanted, extra = _searchtext_args(argv)
    spec = _embed_field(index, wanted)
    embedder_of(ctx)

    def finish(ctx2: Ctx, vectors: np.ndarray):
        eng = search_engine(ctx2)
        if eng.resolve(ctx2.db.id, name) is not index:
            raise ReplyError("The index was dropped before the query could be executed")
        if vectors.shape[1] != spec.vector.dim:
            raise ReplyError(f"ERR field {spec.name} of index `{name}` has DIM {spec.vector.dim} but this server's "
                             f"embedding model makes {vectors.shape[1]}-dim vectors")
        query = [b"FT.SEARCH", name.encode(), f"{prefilter}=>[KNN {k} @{spec.name} $__query]".encode(),
                 b"PARAMS", b"2", b"__query", vectors[0].astype("<f4").tobytes(),
                 b"LIMIT", b"0", str(k).encode(), b"DIALECT", b"2", *extra]
        req = search.parse_search(query, 2)
        search.cap_results(req, search.max_results(eng.config))
        plan = search.plan(index, req)
        total, rows = search.finish(plan, plan.job() if plan.job is not None else None, _sort_loader(ctx2, index))
        return search_reply(ctx2, index, total, rows, req)

    return with_vectors(ctx, [text_of(argv[2], "query")], finish)
