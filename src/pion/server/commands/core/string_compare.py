"""Redis 8.4's compare-and-set and compare-and-delete on strings: the IFEQ / IFNE / IFDEQ /
IFDNE conditions SET checks (``holds``, called from ``strings.set_generic``), DELEX and DIGEST.

A digest is the XXH3 64-bit hash of the value written as 16 lowercase hex digits, Redis's
DIGEST reply; IFDEQ and IFDNE compare it without regard to case. Both commands and SET's
conditions need the key to hold a string (WRONGTYPE otherwise). DELEX is logged as DEL.
"""

from __future__ import annotations

from pion.protocol import errors
from pion.protocol.errors import ReplyError
from pion.server.context import Ctx
from pion.server.registry import command

_CONDITIONS = (b"IFEQ", b"IFNE", b"IFDEQ", b"IFDNE")


def digest(value: bytes) -> bytes:
    """XXH3-64 of ``value`` as 16 lowercase hex digits (xxhash is imported on first use)."""
    import xxhash

    return xxhash.xxh3_64_hexdigest(value).encode()


def holds(condition: bytes, current: bytes | None, match: bytes | None) -> bool:
    """Whether ``current`` (a string, None when the key is missing) passes the condition:
    IFEQ/IFDEQ need the key and an equal value/digest, IFNE/IFDNE a missing key or another."""
    if current is None:
        return condition in (b"IFNE", b"IFDNE")
    if condition in (b"IFEQ", b"IFNE"):
        equal = current == match
    else:
        equal = digest(current) == (match or b"").lower()
    return equal if condition in (b"IFEQ", b"IFDEQ") else not equal


@command("DIGEST", 2, "readonly fast", keys=(1, 1, 1), categories="@read @string @fast", group="string",
         since="8.4.0")
def digest_cmd(ctx: Ctx, argv: list[bytes]):
    """DIGEST key

    The XXH3 hash of the string at key as 16 hex digits; nil for a missing key.
    """
    value = ctx.db.get_typed(argv[1], bytes)
    return None if value is None else digest(value)


@command("DELEX", -2, "write fast", keys=(1, 1, 1), categories="@write @string @fast", group="string",
         since="8.4.0")
def delex(ctx: Ctx, argv: list[bytes]):
    """DELEX key [IFEQ ifeq-value | IFNE ifne-value | IFDEQ ifdeq-digest | IFDNE ifdne-digest]

    Without a condition, DEL of one key (of any type); with one, the key (a string) is removed
    only when the condition holds. 1 when removed, else 0.
    """
    key = argv[1]
    if len(argv) == 2:
        current_exists = ctx.db.get(key) is not None
    elif len(argv) == 4 and argv[2].upper() in _CONDITIONS:
        current = ctx.db.get_typed(key, bytes)
        current_exists = current is not None and holds(argv[2].upper(), current, argv[3])
    else:
        raise ReplyError(errors.SYNTAX)
    if not current_exists or not ctx.db.delete(key):
        return 0
    ctx.dirty()
    ctx.notify("g", "del", key)
    ctx.rewrite([b"DEL", key])
    return 1
