"""String commands (the core slice: GET SET)."""

from __future__ import annotations

from pion.protocol.resp import OK
from pion.server.context import Ctx
from pion.server.registry import command


@command("GET", 2, "readonly fast", keys=(1, 1, 1), categories="@read @string @fast", group="string")
def get(ctx: Ctx, argv: list[bytes]):
    """GET key"""
    return ctx.db.get_typed(argv[1], bytes)


@command("SET", -3, "write denyoom", keys=(1, 1, 1), categories="@write @string @slow", group="string")
def set_(ctx: Ctx, argv: list[bytes]):
    """SET key value [NX | XX] [GET] [EX seconds | PX milliseconds | EXAT unix-time-seconds | PXAT unix-time-milliseconds | KEEPTTL]"""
    ctx.db.set(argv[1], argv[2])
    ctx.dirty()
    return OK
