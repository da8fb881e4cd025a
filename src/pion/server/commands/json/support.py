"""Shared pieces of the JSON command families: loading a document, parsing paths and values,
storing a change, and RedisJSON's error texts (redis-json's ``manager.rs``)."""

from __future__ import annotations

from typing import Any

from pion.protocol.errors import ReplyError
from pion.server.context import Ctx
from pion.storage.budget import UNLIMITED, Budget, timeout_ms
from pion.storage.json_path import CompiledPath, JsonPathError, Path
from pion.storage.json_value import MAX_DEPTH, JsonError, JsonValue, depth, loads

NO_KEY = "ERR could not perform this operation on a key that doesn't exist"
NO_PATH = "ERR Path does not exist"
TOO_DEEP = f"ERR recursion limit exceeded: the document would nest deeper than {MAX_DEPTH} levels"


def check_nesting(levels_above: int, value: Any) -> None:
    """Refuse (before any change) a value that, placed ``levels_above`` containers deep, would
    nest the document past MAX_DEPTH: JSON.SET at a deep path used to grow documents that every
    later JSON.GET answered with an internal RecursionError."""
    if isinstance(value, (dict, list)) and levels_above + depth(value) > MAX_DEPTH:
        raise ReplyError(TOO_DEEP)


def no_path_or(what: str, path: Path | None = None, as_given: bool = False) -> ReplyError:
    """A legacy path that matched nothing of the kind: RedisJSON names the path in its JSONPath form,
    or (JSON.ARRAPPEND, JSON.ARRLEN) as given."""
    where = "Path" if path is None else f"Path '{path.original if as_given else path.text}'"
    return ReplyError(f"ERR {where} does not exist or {what}")


_TYPE_NAMES = {type(None): "null", bool: "boolean", int: "integer", float: "number", str: "string", list: "array",
               dict: "object"}


def wrong_json_type(expected: str, found: Any = ...) -> ReplyError:
    """``... - expected string but found integer`` (the found kind when there is a value)."""
    tail = "" if found is ... else f" but found {_TYPE_NAMES.get(type(found), 'unknown')}"
    return ReplyError(f"WRONGTYPE wrong type of path value - expected {expected}{tail}")


def get_doc(ctx: Ctx, key: bytes) -> JsonValue | None:
    return ctx.db.get_typed(key, JsonValue)


def need_doc(ctx: Ctx, key: bytes) -> JsonValue:
    doc = get_doc(ctx, key)
    if doc is None:
        raise ReplyError(NO_KEY)
    return doc


def parse_path(raw: bytes) -> Path:
    return Path(raw.decode("utf-8", "replace"))


def compile_path(path: Path) -> CompiledPath:
    try:
        return path.compile()
    except JsonPathError as exc:
        raise ReplyError(str(exc)) from None


def read_budget(ctx: Ctx) -> Budget:
    """The time budget of a read's path evaluation: the query TIMEOUT of FT.CONFIG (500 ms by
    default, 0 for none), the one budget this server has for a client's query. RedisJSON has
    no limit of its own; Pion needs one so that a ``$..*..*`` over a large document answers
    ``Timeout limit was reached`` instead of holding the loop. Writes, replay and replicas
    evaluate without one (a write either applies everywhere or nowhere)."""
    if ctx.replaying:
        return UNLIMITED
    search = ctx.server.parts.search
    return Budget(timeout_ms(search.config if search is not None else None))


def parse_json(raw: bytes) -> Any:
    try:
        return loads(raw)
    except JsonError as exc:
        raise ReplyError(str(exc)) from None


def matches(doc: JsonValue, path: Path) -> list[tuple[Any, tuple]]:
    return compile_path(path).find(doc.root)


def changed(ctx: Ctx, key: bytes, doc: JsonValue, event: str, count: int = 1) -> None:
    """After an in-place change: refresh the size, signal the key (WATCH, search indexes),
    count the write and send the keyspace event RedisJSON sends (type 'd', module)."""
    doc.touch()
    ctx.db.signal(key)
    ctx.dirty(count)
    ctx.notify("d", event, key)


def store_new(ctx: Ctx, key: bytes, root: Any, event: str, keep_ttl: bool = False) -> None:
    ctx.db.set(key, JsonValue(root), keep_ttl=keep_ttl)
    ctx.dirty()
    ctx.notify("d", event, key)


def set_at(root: Any, loc: tuple, value: Any) -> Any:
    """Put ``value`` at ``loc``; returns the new root (``loc == ()`` replaces it)."""
    if not loc:
        return value
    parent = root
    for part in loc[:-1]:
        parent = parent[part]
    parent[loc[-1]] = value
    return root


def value_at(root: Any, loc: tuple) -> Any:
    for part in loc:
        root = root[part]
    return root


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and value is not True and value is not False
