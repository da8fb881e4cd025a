"""JSON strings, arrays and objects: JSON.STRAPPEND STRLEN ARRAPPEND ARRINDEX ARRINSERT ARRLEN
ARRPOP ARRTRIM OBJKEYS OBJLEN, with RedisJSON's per-match replies for ``$``-paths and its
first-match-or-error rule for legacy paths (see ``json_cmds``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pion.protocol import errors
from pion.protocol.errors import ReplyError
from pion.server.args import parse_int
from pion.server.commands.json import support as js
from pion.server.context import Ctx
from pion.server.registry import command
from pion.storage.json_path import Path, order_for_mutation
from pion.storage.json_value import dumps

_CATS = "@json"


def _optional_path(argv: list[bytes], at: int, default: str = ".") -> Path:
    return js.parse_path(argv[at]) if len(argv) > at else Path(default)


def _lookup(ctx: Ctx, argv: list[bytes], name: str, missing: ReplyError | None = None) -> tuple[Path, list | None]:
    """The path and its matches for a read command; (path, None) when the key is missing and the
    path is legacy (the reply is nil), an error for a missing key under a JSONPath."""
    if len(argv) > 3:
        raise ReplyError(errors.wrong_arity(name))
    path = _optional_path(argv, 2)
    doc = js.get_doc(ctx, argv[1])
    if doc is None:
        if path.is_legacy:
            return path, None
        raise missing or ReplyError(js.NO_KEY)
    return path, js.compile_path(path).values(doc.root, js.read_budget(ctx))


def _mutate_arrays(ctx: Ctx, key: bytes, path: Path, event: str, fn, what: str = "not an array",
                   adding: list[Any] | None = None, as_given: bool = False):
    """Apply ``fn(array) -> reply`` to every array match (deepest first, replies in match order);
    ``adding``: the values ``fn`` puts into the arrays, checked against the nesting limit first."""
    doc = js.need_doc(ctx, key)
    found = js.matches(doc, path)
    results: list[Any] = [None] * len(found)
    arrays = {loc: i for i, (value, loc) in enumerate(found) if isinstance(value, list)}
    if adding and arrays:
        deepest = max(len(loc) for loc in arrays) + 1
        for value in adding:
            js.check_nesting(deepest, value)
    for loc in order_for_mutation(list(arrays), drop_nested=False):
        results[arrays[loc]] = fn(js.value_at(doc.root, loc))
    if arrays:
        js.changed(ctx, key, doc, event)
    if path.is_legacy:
        if not arrays:
            raise js.no_path_or(what, path, as_given)
        return results[max(arrays.values())]  # RedisJSON answers for the last match
    return results


# -- strings ----------------------------------------------------------------------------------------


@command("JSON.STRAPPEND", -3, "write denyoom", keys=(1, 1, 1), categories=f"@write {_CATS} @slow", group="json", since="1.0.0")
def json_strappend(ctx: Ctx, argv: list[bytes]):
    """JSON.STRAPPEND key [path] value"""
    if len(argv) > 4:
        raise ReplyError(errors.wrong_arity("json.strappend"))
    key = argv[1]
    path = js.parse_path(argv[2]) if len(argv) == 4 else Path(".")
    suffix = js.parse_json(argv[-1])
    doc = js.need_doc(ctx, key)
    if not isinstance(suffix, str):
        raise js.wrong_json_type("string")
    results: list[Any] = []
    changed = False
    for value, loc in js.matches(doc, path):
        if isinstance(value, str):
            new = value + suffix
            doc.root = js.set_at(doc.root, loc, new)
            results.append(len(new.encode()))
            changed = True
        else:
            results.append(None)
    if changed:
        js.changed(ctx, key, doc, "json.strappend")
    if path.is_legacy:
        if not changed:
            raise js.no_path_or("not a string", path)
        return [r for r in results if r is not None][-1]
    return results


@command("JSON.STRLEN", -2, "readonly", keys=(1, 1, 1), categories=f"@read {_CATS} @slow", group="json", since="1.0.0")
def json_strlen(ctx: Ctx, argv: list[bytes]):
    """JSON.STRLEN key [path]"""
    return _measure(ctx, argv, "json.strlen", str, lambda v: len(v.encode()), lambda v, p: js.wrong_json_type("string", v))


def _measure(ctx: Ctx, argv: list[bytes], name: str, kind: type, measure, wrong: Callable[[Any, Path], ReplyError],
             missing: ReplyError | None = None, legacy_missing_is_nil: bool = False):
    """The shape every JSON.*LEN / OBJKEYS reply has: per match ``measure(value)`` or nil for a
    value of another kind; a legacy path (``.a``) answers for its first match, refusing another
    kind with ``wrong`` and no match with -ERR Path does not exist (or nil, OBJ*'s way)."""
    path, found = _lookup(ctx, argv, name, missing)
    if found is None:
        return None
    if path.is_legacy:
        if not found:
            if legacy_missing_is_nil:
                return None
            raise ReplyError(js.NO_PATH)
        if not isinstance(found[0], kind):
            raise wrong(found[0], path)
        return measure(found[0])
    return [measure(v) if isinstance(v, kind) else None for v in found]


# -- arrays -----------------------------------------------------------------------------------------


@command("JSON.ARRAPPEND", -4, "write denyoom", keys=(1, 1, 1), categories=f"@write {_CATS} @slow", group="json", since="1.0.0")
def json_arrappend(ctx: Ctx, argv: list[bytes]):
    """JSON.ARRAPPEND key path value [value ...]"""
    path = js.parse_path(argv[2])
    values = [js.parse_json(raw) for raw in argv[3:]]

    def append(array: list) -> int:
        array.extend(_fresh(values))
        return len(array)

    return _mutate_arrays(ctx, argv[1], path, "json.arrappend", append, adding=values, as_given=True)


def _fresh(values: list[Any]) -> list[Any]:
    return [js.parse_json(dumps(v).encode()) if isinstance(v, (dict, list)) else v for v in values]


@command("JSON.ARRINSERT", -5, "write denyoom", keys=(1, 1, 1), categories=f"@write {_CATS} @slow", group="json", since="1.0.0")
def json_arrinsert(ctx: Ctx, argv: list[bytes]):
    """JSON.ARRINSERT key path index value [value ...]"""
    path = js.parse_path(argv[2])
    index = parse_int(argv[3])
    values = [js.parse_json(raw) for raw in argv[4:]]

    def insert(array: list) -> int:
        at = index + len(array) if index < 0 else index
        if not 0 <= at <= len(array):
            raise ReplyError("ERR index out of bounds")
        array[at:at] = _fresh(values)
        return len(array)

    return _mutate_arrays(ctx, argv[1], path, "json.arrinsert", insert, adding=values)


@command("JSON.ARRLEN", -2, "readonly", keys=(1, 1, 1), categories=f"@read {_CATS} @slow", group="json", since="1.0.0")
def json_arrlen(ctx: Ctx, argv: list[bytes]):
    """JSON.ARRLEN key [path]"""
    return _measure(ctx, argv, "json.arrlen", list, len, lambda v, p: js.no_path_or("not an array", p, as_given=True))


@command("JSON.ARRPOP", -2, "write", keys=(1, 1, 1), categories=f"@write {_CATS} @slow", group="json", since="1.0.0")
def json_arrpop(ctx: Ctx, argv: list[bytes]):
    """JSON.ARRPOP key [path [index]]"""
    if len(argv) > 4:
        raise ReplyError(errors.wrong_arity("json.arrpop"))
    path = _optional_path(argv, 2)
    index = parse_int(argv[3]) if len(argv) > 3 else (-1 if len(argv) > 2 else 2**63 - 1)

    def pop(array: list) -> bytes | None:
        if not array:
            return None
        at = max(0, len(array) + index) if index < 0 else min(index, len(array) - 1)
        return dumps(array.pop(at)).encode()

    return _mutate_arrays(ctx, argv[1], path, "json.arrpop", pop)


@command("JSON.ARRTRIM", 5, "write", keys=(1, 1, 1), categories=f"@write {_CATS} @slow", group="json", since="1.0.0")
def json_arrtrim(ctx: Ctx, argv: list[bytes]):
    """JSON.ARRTRIM key path start stop"""
    path = js.parse_path(argv[2])
    start, stop = parse_int(argv[3]), parse_int(argv[4])

    def trim(array: list) -> int:
        n = len(array)
        hi = _normalize(stop, n)
        lo = _normalize(start, n) if (start < 0 or start < n) else hi + 1
        if lo > hi or n == 0:
            array.clear()
        else:
            array[:] = array[lo:hi + 1]
        return len(array)

    return _mutate_arrays(ctx, argv[1], path, "json.arrtrim", trim)


def _normalize(index: int, n: int) -> int:
    if index < 0:
        return n - min(n, -index)
    return min(n - 1, index) if n > 0 else 0


@command("JSON.ARRINDEX", -4, "readonly", keys=(1, 1, 1), categories=f"@read {_CATS} @slow", group="json", since="1.0.0")
def json_arrindex(ctx: Ctx, argv: list[bytes]):
    """JSON.ARRINDEX key path value [start [stop]]"""
    if len(argv) > 6:
        raise ReplyError(errors.wrong_arity("json.arrindex"))
    path = js.parse_path(argv[2])
    needle = js.parse_json(argv[3])
    start = parse_int(argv[4]) if len(argv) > 4 else 0
    stop = parse_int(argv[5]) if len(argv) > 5 else 0
    doc = js.get_doc(ctx, argv[1])
    if doc is None:
        raise ReplyError(js.NO_PATH)
    found = js.compile_path(path).values(doc.root, js.read_budget(ctx))
    if path.is_legacy:
        if not found:
            raise ReplyError(js.NO_PATH)
        if not isinstance(found[0], list):
            raise js.wrong_json_type("array", found[0])
        return _index_of(found[0], needle, start, stop)
    return [_index_of(v, needle, start, stop) if isinstance(v, list) else None for v in found]


def _index_of(array: list, needle: Any, start: int, stop: int) -> int:
    n = len(array)
    if n == 0:
        return -1
    lo = max(0, n + start) if start < 0 else min(start, n - 1)
    hi = n if stop == 0 else (max(0, n + stop) if stop < 0 else min(stop, n))
    for i in range(lo, hi):
        if _same(array[i], needle):
            return i
    return -1


def _same(a: Any, b: Any) -> bool:
    """RedisJSON's equality: an integer never equals a float (3 vs 3.0), a bool only a bool."""
    return type(a) is type(b) and a == b


# -- objects ----------------------------------------------------------------------------------------


@command("JSON.OBJKEYS", -2, "readonly", keys=(1, 1, 1), categories=f"@read {_CATS} @slow", group="json", since="1.0.0")
def json_objkeys(ctx: Ctx, argv: list[bytes]):
    """JSON.OBJKEYS key [path]"""
    return _measure(ctx, argv, "json.objkeys", dict, lambda v: [k.encode() for k in v],
                    lambda v, p: js.no_path_or("not an object", p), legacy_missing_is_nil=True)


@command("JSON.OBJLEN", -2, "readonly", keys=(1, 1, 1), categories=f"@read {_CATS} @slow", group="json", since="1.0.0")
def json_objlen(ctx: Ctx, argv: list[bytes]):
    """JSON.OBJLEN key [path]"""
    return _measure(ctx, argv, "json.objlen", dict, len, lambda v, p: js.wrong_json_type("object", v),
                    js.no_path_or("not an object"), legacy_missing_is_nil=True)
