"""What COMMAND INFO and COMMAND DOCS report for a command: built from the live command table,
completed with Redis 7's own metadata (docs, tips, key specs) for commands Redis also has.

Arity, flags, key positions and ACL categories always come from Pion's ``CommandSpec`` (what the
dispatcher really does). Docs, request/response tips and key specifications come from
``redis_commands.json``, a snapshot of Redis 7.0's COMMAND DOCS / COMMAND INFO; a Pion command
without an entry gets docs from its spec and a key specification derived from its key range.
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources
from typing import Any

from pion.protocol.resp import SetReply, Status
from pion.server.registry import CommandSpec

#: Redis's command flags in the order COMMAND INFO lists them (Pion-only flags are not shown)
FLAG_ORDER = (
    "write", "readonly", "denyoom", "module", "admin", "pubsub", "noscript", "blocking", "loading",
    "stale", "skip_monitor", "skip_slowlog", "asking", "fast", "no_auth", "may_replicate", "sentinel",
    "only_sentinel", "no_mandatory_keys", "protected", "no_async_loading", "no_multi", "movablekeys",
    "allow_busy",
)


@lru_cache(maxsize=1)
def redis_meta() -> dict[str, dict[str, Any]]:
    text = resources.files("pion.server.admin").joinpath("redis_commands.json").read_text(encoding="utf-8")
    return json.loads(text)["commands"]


def meta_of(spec: CommandSpec) -> dict[str, Any]:
    return redis_meta().get(spec.full_name.lower(), {})


def categories_of(spec: CommandSpec) -> list[str]:
    """The declared ACL categories plus the ones Redis implies from the flags. A module's commands
    (FT.*: the search module Redis 8 bundles) have only the categories the module declares: Redis
    implies none from their flags, so FT.INFO (readonly) is in @search alone and FT.SEARCH in
    @search and @read, as RediSearch registers them."""
    cats = list(spec.categories)
    if spec.group == "search" and spec.name.startswith("ft."):
        return cats
    implied = [("write", "@write"), ("readonly", "@read"), ("admin", "@admin"), ("admin", "@dangerous"),
               ("pubsub", "@pubsub"), ("fast", "@fast"), ("blocking", "@blocking")]
    for flag, cat in implied:
        if flag in spec.flags and cat not in cats:
            cats.append(cat)
    if "@fast" not in cats and "@slow" not in cats:
        cats.append("@slow")
    return cats


def command_info(spec: CommandSpec) -> list[Any]:
    """One COMMAND INFO entry: name, arity, flags, first, last, step, categories, tips, key specs, subs."""
    meta = meta_of(spec)
    flags = [flag for flag in FLAG_ORDER if flag in spec.flags]
    subs = [command_info(sub) for sub in spec.subcommands.values()]
    return [
        spec.full_name.lower().encode(), spec.arity, SetReply(Status(flag) for flag in flags),
        spec.first_key, spec.last_key, spec.step,
        SetReply(Status(cat) for cat in categories_of(spec)),
        SetReply(tip.encode() for tip in meta.get("tips", ())),
        SetReply(_to_reply(ks, "flags") for ks in key_specs(spec)), SetReply(subs),
    ]


def key_specs(spec: CommandSpec) -> list[dict[str, Any]]:
    meta = meta_of(spec)
    if "key_specs" in meta:
        return meta["key_specs"]
    if spec.first_key <= 0:
        return []
    last = spec.last_key - spec.first_key if spec.last_key >= 0 else spec.last_key
    return [{
        "flags": derived_key_flags(spec),
        "begin_search": {"type": "index", "spec": {"index": spec.first_key}},
        "find_keys": {"type": "range", "spec": {"lastkey": last, "keystep": spec.step or 1, "limit": 0}},
    }]


def derived_key_flags(spec: CommandSpec) -> list[str]:
    if "write" in spec.flags:
        return ["RW", "access", "update"]
    return ["RO", "access"]


def command_docs(spec: CommandSpec) -> dict[bytes, Any]:
    """One COMMAND DOCS entry (a map), with the subcommands' docs nested."""
    docs = dict(meta_of(spec).get("docs") or {
        "summary": spec.summary, "since": spec.since, "group": spec.group,
    })
    if spec.subcommands:
        docs["subcommands"] = {sub.full_name.lower(): command_docs(sub) for sub in spec.subcommands.values()}
    return {key.encode(): _doc_value(key, value) for key, value in docs.items()}


def _doc_value(key: str, value: Any) -> Any:
    if key == "subcommands":
        return {name.encode(): docs for name, docs in value.items()}
    if key == "history":
        return SetReply([entry[0].encode(), entry[1].encode()] for entry in value)
    if key == "doc_flags":
        return SetReply(Status(flag) for flag in value)
    if key == "arguments":
        return [_to_reply(arg, "flags") for arg in value]
    return _to_reply(value, "")


def _to_reply(value: Any, flags_key: str) -> Any:
    """JSON metadata -> reply values: strings as bulk, ``flags`` lists as sets of simple strings."""
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            if key == flags_key:
                out[key.encode()] = SetReply(Status(flag) for flag in item)
            elif key == "arguments":
                out[key.encode()] = [_to_reply(arg, flags_key) for arg in item]
            else:
                out[key.encode()] = _to_reply(item, flags_key)
        return out
    if isinstance(value, list):
        return [_to_reply(item, flags_key) for item in value]
    return value


def keys_with_flags(spec: CommandSpec, argv: list[bytes]) -> list[tuple[int, list[str]]]:
    """Key positions in ``argv`` with their access flags (COMMAND GETKEYSANDFLAGS).

    Positions come from the spec (what Pion routes on); flags from the first Redis key
    specification that covers the position, else derived from the command's flags.
    """
    covered: dict[int, list[str]] = {}
    for ks in key_specs(spec):
        flags = _resolve_variable_flags(spec, argv, ks["flags"])
        for pos in _eval_key_spec(ks, argv):
            covered.setdefault(pos, flags)
    positions = spec.key_positions(argv) if (spec.first_key > 0 or spec.key_finder) else sorted(covered)
    if spec.full_name.lower() == "sort":  # Redis's sortGetKeys: the STORE key is overwritten
        for i in range(2, len(argv) - 1):
            if argv[i].upper() == b"STORE":
                covered[i + 1] = ["OW", "update"]
    return [(pos, covered.get(pos, derived_key_flags(spec))) for pos in positions if 0 < pos < len(argv)]


def _resolve_variable_flags(spec: CommandSpec, argv: list[bytes], flags: list[str]) -> list[str]:
    """Redis's setGetKeys / bitfieldGetKeys: the flags a VARIABLE_FLAGS key spec has for this call."""
    if "variable_flags" not in flags:
        return flags
    name = spec.full_name.lower()
    if name == "set":
        return ["RW", "access", "update"] if any(arg.upper() == b"GET" for arg in argv[3:]) else ["OW", "update"]
    words = {arg.upper() for arg in argv[2:]}
    if name == "bitfield" and not words & {b"SET", b"INCRBY"}:
        return ["RO", "access"] if b"GET" in words else []
    return [flag for flag in flags if flag != "variable_flags"]


def _eval_key_spec(ks: dict[str, Any], argv: list[bytes]) -> list[int]:
    """Redis's key-spec search (index/keyword begin, range/keynum find); [] when it cannot tell."""
    begin, find = ks["begin_search"], ks["find_keys"]
    argc = len(argv)
    if begin["type"] == "index":
        start = begin["spec"]["index"]
    elif begin["type"] == "keyword":
        start = _find_keyword(argv, begin["spec"]["keyword"].encode(), begin["spec"]["startfrom"])
        if start is None:
            return []
    else:
        return []
    if find["type"] == "range":
        spec = find["spec"]
        last = start + spec["lastkey"] if spec["lastkey"] >= 0 else argc + spec["lastkey"]
        if spec["lastkey"] == -1 and spec.get("limit", 0) > 1:
            last = start + ((argc - 1) - start) // spec["limit"]
        return list(range(start, min(last, argc - 1) + 1, spec["keystep"] or 1))
    if find["type"] == "keynum":
        spec = find["spec"]
        try:
            count = int(argv[start + spec["keynumidx"]])
        except (IndexError, ValueError):
            return []
        first = start + spec["firstkey"]
        return [first + i * spec["keystep"] for i in range(max(count, 0)) if first + i * spec["keystep"] < argc]
    return []


def _find_keyword(argv: list[bytes], keyword: bytes, startfrom: int) -> int | None:
    argc = len(argv)
    if startfrom >= 0:
        indexes = range(startfrom, argc)
    else:
        indexes = range(argc + startfrom, 0, -1)
    for i in indexes:
        if 0 < i < argc and argv[i].upper() == keyword:
            return i + 1
    return None
