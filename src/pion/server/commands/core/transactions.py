"""Transactions: MULTI EXEC DISCARD WATCH UNWATCH, with Redis 7's semantics.

Queue-time errors (unknown command, wrong arity, refusals) abort EXEC with EXECABORT. WATCH
aborts EXEC (null reply) when a watched key was modified or has expired since, except keys that
were already expired when watched (Redis's stale-key rule, see ``Client.touch_watched``). The
queued commands' effects reach the log as one record, so a transaction replays atomically.
"""

from __future__ import annotations

from pion.protocol.errors import ReplyError
from pion.protocol.resp import NULL_ARRAY, OK
from pion.server.context import Ctx
from pion.server.registry import command
from pion.storage.keyspace import now_ms


@command("MULTI", 1, "noscript loading stale fast allow_busy", categories="@fast @transaction", group="transactions")
def multi(ctx: Ctx, argv: list[bytes]):
    """MULTI"""
    client = ctx.client
    if client.multi is not None:
        raise ReplyError("ERR MULTI calls can not be nested")
    client.multi = []
    client.multi_error = False
    return OK


@command("DISCARD", 1, "noscript loading stale fast allow_busy", categories="@fast @transaction", group="transactions")
def discard(ctx: Ctx, argv: list[bytes]):
    """DISCARD"""
    client = ctx.client
    if client.multi is None:
        raise ReplyError("ERR DISCARD without MULTI")
    client.multi = None
    client.multi_error = False
    ctx.server.drop_watches(client)
    return OK


@command("EXEC", 1, "noscript loading stale skip_slowlog", categories="@slow @transaction", group="transactions")
def exec_(ctx: Ctx, argv: list[bytes]):
    """EXEC"""
    client = ctx.client
    server = ctx.server
    if client.multi is None:
        raise ReplyError("ERR EXEC without MULTI")
    queued, aborted = client.multi, client.multi_error
    client.multi = None
    client.multi_error = False
    if aborted:
        server.drop_watches(client)
        raise ReplyError("EXECABORT Transaction discarded because of previous errors.")
    if client.dirty_cas or _watched_key_expired(ctx):
        server.drop_watches(client)
        return NULL_ARRAY
    server.drop_watches(client)
    replies = []
    client.executing = True
    try:
        for spec, args in queued:
            refusal = server.admission.command_refusal(client, spec, args)
            replies.append(refusal if refusal is not None else server.dispatcher.call(client, spec, args))
            if refusal is None:
                server.dispatcher.monitor(client, spec, args)
    finally:
        client.executing = False
    return replies


def _watched_key_expired(ctx: Ctx) -> bool:
    """A watched key that was live at WATCH time and has expired since aborts EXEC."""
    client = ctx.client
    now = now_ms()
    for db, key in client.watched:
        if (db.id, key) in client.watched_expired:
            continue
        when = db.expires.get(key)
        if when is not None and when <= now and key in db.data:
            return True
    return False


@command("WATCH", -2, "noscript loading stale fast allow_busy", keys=(1, -1, 1), categories="@fast @transaction", group="transactions", since="2.2.0")
def watch(ctx: Ctx, argv: list[bytes]):
    """WATCH key [key ...]"""
    client = ctx.client
    if client.multi is not None:
        raise ReplyError("ERR WATCH inside MULTI is not allowed")
    db = ctx.db
    now = now_ms()
    for key in argv[1:]:
        if any(w_db is db and w_key == key for w_db, w_key in client.watched):
            continue
        client.watched.append((db, key))
        db.watchers.setdefault(key, set()).add(client)
        when = db.expires.get(key)
        if when is not None and when <= now and key in db.data:
            client.watched_expired.add((db.id, key))
    return OK


@command("UNWATCH", 1, "noscript loading stale fast allow_busy", categories="@fast @transaction", group="transactions", since="2.2.0")
def unwatch(ctx: Ctx, argv: list[bytes]):
    """UNWATCH"""
    ctx.server.drop_watches(ctx.client)
    return OK
