"""AI.EMBED, the reference's other AI.* names (refused with the reason), and ``install``, which puts
the embedding component (``pion.embedding.service.Embedder``) on a server.

The embedder is ``server.parts.embedding``. A command that needs vectors calls
``with_vectors(ctx, texts, finish)``: the texts are embedded in the embedder's wait pool (the
event loop never waits on the model, ``pion.server.deferred``), then ``finish(ctx, vectors)``
runs on the loop and applies the change. Embedding commands are flagged ``noscript no_multi``:
inside a script or a transaction the reply is needed at once, and a first request may wait for
the model to load. What they write is logged as plain HSET/DEL records carrying the vectors, so
replaying the log never needs the model.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import numpy as np

from pion.embedding.providers import EmbeddingError
from pion.embedding.service import EmbedConfig, Embedder
from pion.protocol import errors
from pion.protocol.errors import ReplyError
from pion.server import deferred
from pion.server.component import Component
from pion.server.context import Ctx
from pion.server.registry import command

_CATS = "@read @pion @slow"
#: the reference's AI.* commands Pion does not offer, with the reason given to the client
NOT_OFFERED = {
    "AI.COMPLETE": "Pion runs no generative model in the server: call your model in the client and cache its "
                   "answers with AI.SEMANTIC_CACHE GET/SET",
    "AI.CHAT": "Pion runs no generative model in the server: fetch context with AI.MEMORY RECALL or "
               "FT.SEARCH, then call your model in the client",
    "AI.GENERATE": "Pion runs no generative model in the server (the client runs the model)",
    "AI.LOADMODEL": "the embedding model is chosen at start with --embed-provider (docs/embeddings.md)",
}


def embed_config(settings: Any) -> EmbedConfig:
    threads = settings.embed_threads or max(1, (os.cpu_count() or 2) // 2)
    return EmbedConfig(provider=settings.embed_provider, url=settings.embed_url, model=settings.embed_model,
                       api_key=settings.embed_api_key, dim=settings.embed_dim, batch_size=settings.embed_batch_size,
                       threads=threads, timeout=float(settings.embed_timeout), preload=settings.embed_preload)


def install(server: Any) -> Embedder:
    """The embedder (not started: the model loads on first use, or at start with embed-preload),
    its stop hook and INFO ``# Embedding``."""
    embedder = server.parts.embedding
    if embedder is not None:
        return embedder
    try:
        embedder = Embedder(embed_config(server.settings))
    except ValueError as exc:
        from pion.server.errors import StartupError

        raise StartupError(str(exc)) from None
    server.parts.embedding = embedder
    server.add_component(EmbedderPart(embedder))
    return embedder


class EmbedderPart(Component):
    """The embedder's start (preload), stop, cron and INFO ``# Embedding`` (before ``# Pion``)."""

    name = "embedding"
    info_name = "embedding"

    def __init__(self, embedder: Embedder) -> None:
        self.embedder = embedder

    async def start(self) -> None:
        self.embedder.start()

    async def stop(self) -> None:
        self.embedder.stop()

    def cron(self) -> None:
        self.embedder.cron()

    def info_section(self) -> dict[str, Any]:
        return self.embedder.info()


def embedder_of(ctx: Ctx) -> Embedder:
    embedder = ctx.server.parts.embedding
    if embedder is None:
        raise ReplyError("ERR embeddings are not enabled on this server")
    return embedder


def scope_of(ctx: Ctx) -> bytes:
    """The embedding cache's scope: the tenant (its texts never warm another tenant's cache)."""
    tenant = ctx.client.tenant
    return tenant.encode() if tenant else b""


def text_of(raw: bytes, what: str = "text") -> str:
    try:
        return bytes(raw).decode("utf-8")
    except UnicodeDecodeError:
        raise ReplyError(f"ERR the {what} to embed must be UTF-8 text") from None


def with_vectors(ctx: Ctx, texts: list[str], finish: Callable[[Ctx, np.ndarray], Any]) -> Any:
    """Embed ``texts`` off the event loop, then ``finish(ctx, vectors)`` on it (or inline where the
    reply is needed at once). Embedding errors answer ``-ERR <why>``."""
    embedder = embedder_of(ctx)
    scope = scope_of(ctx)
    known = embedder.lookup(texts, scope)  # all cached (a repeated query): no thread hand-off
    if known is not None:
        return finish(ctx, known)

    def job() -> np.ndarray:
        try:
            return embedder.embed(texts, scope)
        except EmbeddingError as exc:
            raise ReplyError(f"ERR {exc}") from None

    if deferred.can_defer(ctx):
        return deferred.Deferred([job], lambda ctx2, results: finish(ctx2, results[0]), executor=embedder.wait_pool)
    return finish(ctx, job())


def check_dim(embedder: Embedder, vectors: np.ndarray, dim: int, where: str) -> None:
    """A vector width that differs from an index's is an error that says both, never an empty result."""
    if vectors.shape[1] != dim:
        raise ReplyError(f"ERR {where} holds {dim}-dim vectors but this server's embedding model "
                         f"({embedder.name}) makes {vectors.shape[1]}-dim ones: start the server with the model "
                         f"the index was built with, or drop and rebuild the index")


@command("AI.EMBED", -2, "readonly noscript no_multi", categories=_CATS, group="pion", since="0.1.0")
def ai_embed(ctx: Ctx, argv: list[bytes]):
    """AI.EMBED text [text ...]: one FP32 little-endian blob per text (unit length: dot = cosine),
    ready for FT.SEARCH PARAMS or VADD FP32."""
    texts = [text_of(raw) for raw in argv[1:]]
    if len(texts) > 4096:
        raise ReplyError("ERR AI.EMBED takes at most 4096 texts at a time")
    return with_vectors(ctx, texts, lambda ctx2, vectors: [row.astype("<f4").tobytes() for row in vectors])


def _refuse(name: str, why: str):
    def handler(ctx: Ctx, argv: list[bytes]):
        raise ReplyError(f"ERR {name} is not offered by Pion: {why}")

    handler.__doc__ = f"{name} ...: refused ({why})."
    return command(name, -1, "readonly fast", categories="@read @pion", group="pion", since="0.1.0")(handler)


ai_complete = _refuse("AI.COMPLETE", NOT_OFFERED["AI.COMPLETE"])
ai_chat = _refuse("AI.CHAT", NOT_OFFERED["AI.CHAT"])
ai_generate = _refuse("AI.GENERATE", NOT_OFFERED["AI.GENERATE"])
ai_loadmodel = _refuse("AI.LOADMODEL", NOT_OFFERED["AI.LOADMODEL"])


def run_writes(ctx: Ctx, writes: list[list[bytes]]) -> None:
    """Apply plain write commands (HSET, DEL, PEXPIREAT) as nested calls, as a script's redis.call
    does: each is logged as itself (so replay needs no model) and counts against the tenant's
    quota like any write; the AI.* command's own argv is not logged."""
    dispatcher = ctx.server.dispatcher
    for argv in writes:
        spec = dispatcher.lookup(argv)
        if isinstance(spec, ReplyError):
            raise spec
        reply = dispatcher.call(ctx.client, spec, argv)
        if isinstance(reply, ReplyError):
            raise reply
    ctx.no_propagate()


def live_value(ctx: Ctx, key: bytes) -> Any:
    """A key's value unless it has expired (read without side effects)."""
    from pion.storage.keyspace import now_ms

    db = ctx.db
    when = db.expires.get(key)
    if when is not None and when <= now_ms():
        return None
    return db.data.get(key)


def parse_options(argv: list[bytes], start: int, allowed: dict[bytes, int]) -> dict[bytes, Any]:
    """``NAME value`` / ``FLAG`` options after ``start``; each name once; anything else is a syntax error."""
    out: dict[bytes, Any] = {}
    i = start
    while i < len(argv):
        name = bytes(argv[i]).upper()
        if name not in allowed or name in out:
            raise ReplyError(errors.SYNTAX)
        takes = allowed[name]
        if i + takes >= len(argv) and takes:
            raise ReplyError(errors.SYNTAX)
        out[name] = argv[i + 1] if takes else True
        i += 1 + takes
    return out
