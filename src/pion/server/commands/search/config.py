"""FT.CONFIG GET | SET | HELP: RediSearch 2.10's options (``vector/ft_config.py``), replied as
RediSearch replies them: GET ``[[NAME, value], ...]`` (a map in RESP3; the names are simple
strings, a value without one is nil), ``*`` for every option and otherwise one name (no globs),
HELP ``[[NAME, Description, text, Value, value], ...]`` (RESP3: a map of maps); SET answers OK,
``EXCESSARGS`` (a status) when arguments are left over, or RediSearch's error text. An unknown
action answers the status ``No such configuration action``, as RediSearch does.
"""

from __future__ import annotations

from typing import Any

from pion.protocol import errors
from pion.protocol.errors import ReplyError
from pion.protocol.resp import OK, Status
from pion.server.commands.search.admin import engine
from pion.server.context import Ctx
from pion.server.registry import command
from pion.vector import ft_config


def _value(config: dict[str, str], name: str) -> bytes | None:
    value = config.get(name)
    return None if value is None else value.encode()


@command("FT.CONFIG", -3, "admin", categories="@search @admin", group="search", since="1.0.0")
def ft_config_cmd(ctx: Ctx, argv: list[bytes]):
    """FT.CONFIG GET option | SET option value | HELP option"""
    eng = engine(ctx)
    action = argv[1].upper()
    name = argv[2].decode("utf-8", "replace")
    resp3 = ctx.client.proto >= 3
    if action in (b"GET", b"HELP"):
        if len(argv) != 3:
            raise ReplyError(errors.wrong_arity("FT.CONFIG"))
        found = ft_config.names(name)
        if action == b"GET":
            if resp3:
                return {Status(n): _value(eng.config, n) for n in found}
            return [[Status(n), _value(eng.config, n)] for n in found]
        out: Any
        if resp3:
            out = {Status(n): {Status("Description"): Status(ft_config.BY_NAME[n].help),
                               Status("Value"): _value(eng.config, n)} for n in found}
            return out
        return [[Status(n), Status("Description"), Status(ft_config.BY_NAME[n].help), Status("Value"),
                 _value(eng.config, n)] for n in found]
    if action == b"SET":
        rest = [a.decode("utf-8", "replace") for a in argv[3:]]
        try:
            used = ft_config.set_option(eng.config, name, rest)
        except ft_config.ConfigError as exc:
            raise ReplyError(str(exc)) from None
        ctx.dirty()
        return Status("EXCESSARGS") if used != len(rest) else OK
    return Status("No such configuration action")
