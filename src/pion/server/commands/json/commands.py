"""JSON documents (RedisJSON's commands): JSON.SET GET MGET MSET MERGE DEL FORGET TYPE RESP
CLEAR TOGGLE NUMINCRBY NUMMULTBY DEBUG. Strings, arrays and objects live in ``json_containers``.

Paths follow RedisJSON: ``$``-paths act on every match and answer one reply element per match;
legacy paths (``.``, ``.a.b``, ``a``) act on the matches but answer for the first, and turn
"no match" into an error. Reply shapes and error texts are RedisJSON's (redis-json
``commands.rs``), including the RESP3 differences (JSON.TYPE and NUMINCRBY answer arrays).
A write changes the tree in place and signals the key, so WATCH and search indexes follow.
"""

from __future__ import annotations

from typing import Any

from pion.protocol import errors
from pion.protocol.errors import ReplyError
from pion.protocol.resp import OK, Status
from pion.server.commands.json import support as js
from pion.server.context import Ctx
from pion.server.registry import command
from pion.storage.json_path import Path, order_for_mutation
from pion.storage.json_value import JsonValue, dumps, format_number, type_name_of

_CATS = "@json"
_GET_OPTIONS = (b"INDENT", b"NEWLINE", b"SPACE", b"NOESCAPE", b"FORMAT")


# -- JSON.SET / MSET / MERGE ------------------------------------------------------------------------


def _set_one(ctx: Ctx, key: bytes, path: Path, value: Any, nx: bool, xx: bool) -> bool | None:
    """JSON.SET's core: True if every match was set, None when nothing was (NX/XX, no parent)."""
    doc = js.get_doc(ctx, key)
    if doc is None:
        if xx:
            return None
        if not path.is_root:
            raise ReplyError("ERR new objects must be created at the root")
        js.store_new(ctx, key, value, "json.set")
        return True
    if path.is_root:
        if nx:
            return None
        js.store_new(ctx, key, value, "json.set", keep_ttl=True)
        return True
    compiled = js.compile_path(path)
    if not nx:
        found = [loc for _, loc in compiled.find(doc.root)]
        if found:
            js.check_nesting(max(len(loc) for loc in found), value)
            for loc in order_for_mutation(found):
                js.set_at(doc.root, loc, _copy(value) if len(found) > 1 else value)
            js.changed(ctx, key, doc, "json.set")
            return True
    if xx:
        return None
    return _add_member(ctx, key, doc, compiled, value)


def _add_member(ctx: Ctx, key: bytes, doc: JsonValue, compiled, value: Any) -> bool | None:
    """Create the last member of a static path in each existing parent object."""
    if not compiled.is_static:
        raise ReplyError("Err wrong static path")
    kind, last = compiled.steps[-1]
    if kind == "index":
        if not compiled.find(doc.root):
            raise ReplyError("ERR array index out of range")
        return None
    parent_path = type(compiled)(compiled.steps[:-1])
    parents = parent_path.find(doc.root)
    if parents:
        js.check_nesting(max(len(loc) for _, loc in parents) + 1, value)
    added = 0
    for parent, _ in parents:
        if isinstance(parent, dict) and last not in parent:
            parent[last] = _copy(value) if added else value
            added += 1
    if not added:
        return None
    js.changed(ctx, key, doc, "json.set")
    return True


def _copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


@command("JSON.SET", -4, "write denyoom", keys=(1, 1, 1), categories=f"@write {_CATS} @slow", group="json", since="1.0.0")
def json_set(ctx: Ctx, argv: list[bytes]):
    """JSON.SET key path value [NX | XX]"""
    nx = xx = False
    i = 4
    while i < len(argv):
        opt = argv[i].upper()
        if opt == b"NX" and not xx:
            nx = True
        elif opt == b"XX" and not nx:
            xx = True
        elif opt == b"FORMAT" and i + 1 < len(argv) and argv[i + 1].upper() in (b"JSON", b"STRING"):
            i += 1
        else:
            raise ReplyError(errors.SYNTAX)
        i += 1
    path = js.parse_path(argv[2])
    value = js.parse_json(argv[3])
    return OK if _set_one(ctx, argv[1], path, value, nx, xx) else None


@command("JSON.MSET", -4, "write denyoom", keys=(1, -1, 3), categories=f"@write {_CATS} @slow", group="json", since="2.6.0")
def json_mset(ctx: Ctx, argv: list[bytes]):
    """JSON.MSET key path value [key path value ...]"""
    if (len(argv) - 1) % 3:
        raise ReplyError(errors.wrong_arity("json.mset"))
    triples = []
    for i in range(1, len(argv), 3):  # validate everything before changing anything
        key, path = argv[i], js.parse_path(argv[i + 1])
        doc = js.get_doc(ctx, key)
        if doc is None and not path.is_root:
            raise ReplyError("ERR new objects must be created at the root")
        if not path.is_root:
            js.compile_path(path)
        triples.append((key, path, js.parse_json(argv[i + 2])))
    for key, path, value in triples:
        _set_one(ctx, key, path, value, False, False)
    return OK  # RedisJSON answers OK even where a path matched nothing


def _merge(target: Any, patch: Any) -> Any:
    """RFC 7396 merge patch: null deletes, objects merge member by member, anything else replaces."""
    if not isinstance(patch, dict):
        return patch
    if not isinstance(target, dict):
        target = {}
    for name, item in patch.items():
        if item is None:
            target.pop(name, None)
        else:
            target[name] = _merge(target.get(name), item)
    return target


@command("JSON.MERGE", -4, "write denyoom", keys=(1, 1, 1), categories=f"@write {_CATS} @slow", group="json", since="2.6.0")
def json_merge(ctx: Ctx, argv: list[bytes]):
    """JSON.MERGE key path value"""
    if len(argv) > 4:
        if not (len(argv) == 6 and argv[4].upper() == b"FORMAT"):
            raise ReplyError(errors.SYNTAX)
    key, path = argv[1], js.parse_path(argv[2])
    patch = js.parse_json(argv[3])
    doc = js.get_doc(ctx, key)
    if doc is None:
        if not path.is_root:
            raise ReplyError("ERR new objects must be created at the root")
        js.store_new(ctx, key, _merge(None, patch) if isinstance(patch, dict) else patch, "json.merge")
        return OK
    if path.is_root:
        doc.root = _merge(doc.root, patch)
        js.changed(ctx, key, doc, "json.merge")
        return OK
    compiled = js.compile_path(path)
    found = [loc for _, loc in compiled.find(doc.root)]
    if found:
        js.check_nesting(max(len(loc) for loc in found), patch)
        for loc in order_for_mutation(found, drop_nested=False):
            js.set_at(doc.root, loc, _merge(js.value_at(doc.root, loc), _copy(patch)))
        js.changed(ctx, key, doc, "json.merge")
        return OK
    if patch is None or not compiled.is_static:
        return None
    return OK if _add_member(ctx, key, doc, compiled, patch) else None


# -- reads ------------------------------------------------------------------------------------------


def _render(values: list[Any], fmt: tuple[str | None, str | None, str | None]) -> str:
    return dumps(values, *fmt)


def _get_paths(ctx: Ctx, doc: JsonValue, paths: list[Path], fmt: tuple, expand: str | None):
    budget = js.read_budget(ctx)
    if expand is not None:  # RESP3 FORMAT EXPAND/EXPAND1: native values, one array per path
        return [[_expand(v, expand == "EXPAND") for v in js.compile_path(p).values(doc.root, budget)] for p in paths]
    legacy = all(p.is_legacy for p in paths)
    if len(paths) == 1:
        found = js.compile_path(paths[0]).values(doc.root, budget)
        if legacy:
            if not found:
                raise ReplyError(js.NO_PATH)
            return dumps(found[0], *fmt).encode()
        return _render(found, fmt).encode()
    out: dict[str, Any] = {}
    for p in paths:
        found = js.compile_path(p).values(doc.root, budget)
        if legacy:
            if not found:
                raise ReplyError(js.NO_PATH)
            out[p.original] = found[0]
        else:
            out[p.original] = found
    return dumps(out, *fmt).encode()


def _expand(value: Any, deep: bool) -> Any:
    if value is None or value is True or value is False or isinstance(value, (int, float)):
        return value
    if isinstance(value, str):
        return value.encode()
    if not deep:
        return dumps(value).encode()
    if isinstance(value, list):
        return [_expand(v, True) for v in value]
    return {k.encode(): _expand(v, True) for k, v in value.items()}


@command("JSON.GET", -2, "readonly", keys=(1, 1, 1), categories=f"@read {_CATS} @slow", group="json", since="1.0.0")
def json_get(ctx: Ctx, argv: list[bytes]):
    """JSON.GET key [INDENT indent] [NEWLINE newline] [SPACE space] [path ...]"""
    indent = newline = space = None
    expand = None
    paths: list[Path] = []
    i = 2
    while i < len(argv):
        arg = argv[i]
        opt = arg.upper() if len(arg) <= 8 else b""
        if opt in _GET_OPTIONS and opt != b"NOESCAPE":
            if i + 1 >= len(argv):
                raise ReplyError(errors.wrong_arity("json.get"))
            val = argv[i + 1].decode("utf-8", "replace")
            if opt == b"INDENT":
                indent = val
            elif opt == b"NEWLINE":
                newline = val
            elif opt == b"SPACE":
                space = val
            else:
                if ctx.client.proto < 3 and not paths:
                    raise ReplyError("ERR FORMAT argument is not supported on RESP2")
                fmt_name = val.upper()
                if fmt_name not in ("STRING", "EXPAND1", "EXPAND"):
                    raise ReplyError("ERR wrong reply format")
                expand = None if fmt_name == "STRING" or ctx.client.proto < 3 else fmt_name
            i += 2
            continue
        if opt != b"NOESCAPE":
            paths.append(js.parse_path(arg))
        i += 1
    doc = js.get_doc(ctx, argv[1])
    if doc is None:
        return None
    return _get_paths(ctx, doc, paths or [Path(".")], (indent, newline, space), expand)


@command("JSON.MGET", -3, "readonly", keys=(1, -2, 1), categories=f"@read {_CATS} @slow", group="json", since="1.0.0")
def json_mget(ctx: Ctx, argv: list[bytes]):
    """JSON.MGET key [key ...] path"""
    path = js.parse_path(argv[-1])
    compiled = js.compile_path(path)
    budget = js.read_budget(ctx)
    out: list[bytes | None] = []
    for key in argv[1:-1]:
        value = ctx.db.get(key)
        if not isinstance(value, JsonValue):
            out.append(None)
            continue
        found = compiled.values(value.root, budget)
        if path.is_legacy:
            out.append(dumps(found[0]).encode() if found else None)
        else:
            out.append(dumps(found).encode())
    return out


@command("JSON.TYPE", -2, "readonly", keys=(1, 1, 1), categories=f"@read {_CATS} @slow", group="json", since="1.0.0")
def json_type(ctx: Ctx, argv: list[bytes]):
    """JSON.TYPE key [path]"""
    if len(argv) > 3:
        raise ReplyError(errors.wrong_arity("json.type"))
    path = js.parse_path(argv[2]) if len(argv) > 2 else Path(".")
    doc = js.get_doc(ctx, argv[1])
    if doc is None:
        reply: Any = None
    else:
        found = js.compile_path(path).values(doc.root, js.read_budget(ctx))
        if path.is_legacy:
            reply = type_name_of(found[0]).encode() if found else None
        else:
            reply = [type_name_of(v).encode() for v in found]
    return [reply] if ctx.client.proto >= 3 else reply


def _resp(value: Any) -> Any:
    if value is None:
        return None
    if value is True or value is False:
        return Status("true" if value else "false")
    if isinstance(value, (int, float)):
        return value if isinstance(value, int) else _float_reply(value)
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, list):
        return [Status("["), *(_resp(v) for v in value)]
    out: list[Any] = [Status("{")]
    for name, item in value.items():
        out.append(name.encode())
        out.append(_resp(item))
    return out


def _float_reply(value: float) -> Any:
    return value  # RESP3 double; RESP2 bulk string


@command("JSON.RESP", -2, "readonly", keys=(1, 1, 1), categories=f"@read {_CATS} @slow", group="json", since="1.0.0")
def json_resp(ctx: Ctx, argv: list[bytes]):
    """JSON.RESP key [path]"""
    if len(argv) > 3:
        raise ReplyError(errors.wrong_arity("json.resp"))
    path = js.parse_path(argv[2]) if len(argv) > 2 else Path(".")
    doc = js.get_doc(ctx, argv[1])
    if doc is None:
        return None
    found = js.compile_path(path).values(doc.root, js.read_budget(ctx))
    if path.is_legacy:
        if not found:
            raise ReplyError(js.NO_PATH)
        return _resp(found[0])
    return [_resp(v) for v in found]


# -- deletes ----------------------------------------------------------------------------------------


def _del(ctx: Ctx, argv: list[bytes]) -> int:
    if len(argv) > 3:
        raise ReplyError(errors.wrong_arity(argv[0].decode().lower()))
    key = argv[1]
    path = js.parse_path(argv[2]) if len(argv) > 2 else Path(".")
    doc = js.get_doc(ctx, key)
    if doc is None:
        return 0
    if path.is_root:
        ctx.db.delete(key)
        ctx.dirty()
        ctx.notify("d", "json.del", key)
        return 1
    found = [loc for _, loc in js.matches(doc, path)]
    deleted = 0
    for loc in order_for_mutation(found):
        if not loc:
            continue
        parent = js.value_at(doc.root, loc[:-1])
        del parent[loc[-1]]
        deleted += 1
    if deleted:
        if isinstance(doc.root, (dict, list)) and not doc.root:  # an emptied root goes with its key
            ctx.db.delete(key)
            ctx.dirty()
            ctx.notify("d", "json.del", key)
        else:
            js.changed(ctx, key, doc, "json.del")
    return deleted


@command("JSON.DEL", -2, "write", keys=(1, 1, 1), categories=f"@write {_CATS} @slow", group="json", since="1.0.0")
def json_del(ctx: Ctx, argv: list[bytes]):
    """JSON.DEL key [path]"""
    return _del(ctx, argv)


@command("JSON.FORGET", -2, "write", keys=(1, 1, 1), categories=f"@write {_CATS} @slow", group="json", since="1.0.0")
def json_forget(ctx: Ctx, argv: list[bytes]):
    """JSON.FORGET key [path]"""
    return _del(ctx, argv)


@command("JSON.CLEAR", -2, "write", keys=(1, 1, 1), categories=f"@write {_CATS} @slow", group="json", since="2.0.0")
def json_clear(ctx: Ctx, argv: list[bytes]):
    """JSON.CLEAR key [path]"""
    if len(argv) > 3:
        raise ReplyError(errors.wrong_arity("json.clear"))
    key = argv[1]
    path = js.parse_path(argv[2]) if len(argv) > 2 else Path("$")
    doc = js.need_doc(ctx, key)
    cleared = 0
    for value, loc in js.matches(doc, path):
        if isinstance(value, (dict, list)) and value:
            value.clear()
        elif js.is_number(value) and value != 0:
            doc.root = js.set_at(doc.root, loc, 0)
        else:
            continue
        cleared += 1
    if cleared:
        js.changed(ctx, key, doc, "json.clear")
    return cleared


@command("JSON.TOGGLE", 3, "write denyoom", keys=(1, 1, 1), categories=f"@write {_CATS} @slow", group="json", since="2.0.0")
def json_toggle(ctx: Ctx, argv: list[bytes]):
    """JSON.TOGGLE key path"""
    key, path = argv[1], js.parse_path(argv[2])
    doc = js.need_doc(ctx, key)
    results: list[Any] = []
    last = None
    for value, loc in js.matches(doc, path):
        if value is True or value is False:
            last = not value
            doc.root = js.set_at(doc.root, loc, last)
            results.append(int(last))
        else:
            results.append(None)
    if last is not None:
        js.changed(ctx, key, doc, "json.toggle")
    if path.is_legacy:
        if last is None:
            raise js.no_path_or("not a bool", path)
        return ("true" if last else "false").encode()
    return results


# -- numbers ----------------------------------------------------------------------------------------


def _num_op(ctx: Ctx, argv: list[bytes], name: str, mult: bool):
    key, path = argv[1], js.parse_path(argv[2])
    operand = js.parse_json(argv[3])
    if not js.is_number(operand):
        raise ReplyError("bad input number")
    doc = js.need_doc(ctx, key)
    results: list[Any] = []
    any_changed = False
    for value, loc in js.matches(doc, path):
        if not js.is_number(value):
            results.append(None)
            continue
        new = _apply_num(value, operand, mult)
        doc.root = js.set_at(doc.root, loc, new)
        results.append(new)
        any_changed = True
    if any_changed:
        js.changed(ctx, key, doc, name)
    if ctx.client.proto >= 3:
        return results
    if path.is_legacy:
        if not any_changed:
            raise js.no_path_or("does not contains a number", path)
        last = [r for r in results if r is not None][-1]
        return format_number(last).encode()
    return dumps(results).encode()


def _apply_num(value: int | float, operand: int | float, mult: bool) -> int | float:
    if isinstance(value, int) and isinstance(operand, int):
        result = value * operand if mult else value + operand
        if not -(2**63) <= result < 2**63:
            raise ReplyError("ERR numeric overflow")
        return result
    result = float(value) * float(operand) if mult else float(value) + float(operand)
    if result != result or result in (float("inf"), float("-inf")):
        raise ReplyError("ERR result is not a number")
    return result


@command("JSON.NUMINCRBY", 4, "write denyoom", keys=(1, 1, 1), categories=f"@write {_CATS} @slow", group="json", since="1.0.0")
def json_numincrby(ctx: Ctx, argv: list[bytes]):
    """JSON.NUMINCRBY key path value"""
    return _num_op(ctx, argv, "json.numincrby", mult=False)


@command("JSON.NUMMULTBY", 4, "write denyoom", keys=(1, 1, 1), categories=f"@write {_CATS} @slow", group="json", since="1.0.0")
def json_nummultby(ctx: Ctx, argv: list[bytes]):
    """JSON.NUMMULTBY key path value"""
    return _num_op(ctx, argv, "json.nummultby", mult=True)


# -- JSON.DEBUG -------------------------------------------------------------------------------------


@command("JSON.DEBUG", -2, "readonly", keys=(2, 2, 1), categories=f"@read {_CATS} @slow", group="json", since="1.0.0")
def json_debug(ctx: Ctx, argv: list[bytes]):
    """JSON.DEBUG MEMORY key [path] | HELP"""
    sub = argv[1].upper()
    if sub == b"HELP":
        return [b"MEMORY <key> [path] - reports memory usage", b"HELP                - this message"]
    if sub != b"MEMORY" or len(argv) < 3:
        raise ReplyError("ERR unknown subcommand - try `JSON.DEBUG HELP`")
    from pion.storage.json_value import estimate_size

    path = js.parse_path(argv[3]) if len(argv) > 3 else Path(".")
    doc = js.get_doc(ctx, argv[2])
    if path.is_legacy:
        if doc is None:
            return 0
        found = js.compile_path(path).values(doc.root, js.read_budget(ctx))
        if not found:
            raise ReplyError(js.NO_PATH)
        return estimate_size(found[0])
    if doc is None:
        return []
    return [estimate_size(v) for v in js.compile_path(path).values(doc.root, js.read_budget(ctx))]
