"""Hash field expiry (Redis 7.4): HEXPIRE HPEXPIRE HEXPIREAT HPEXPIREAT HTTL HPTTL HEXPIRETIME
HPEXPIRETIME HPERSIST, the lazy field expiry every hash command reads through (``load``), and
an active sweep on the server cron for hashes nobody touches.

Registered through ``hashes`` (which imports the handlers). A field whose time has come is
removed when its hash is next touched, or by the sweep, and logged as HDEL, as Redis does, so
replay never depends on the clock; while loading nothing expires, as in Redis. Relative times
are logged as HPEXPIREAT with the absolute time in ms; fields not updated are left out of it.
"""

from __future__ import annotations

import heapq
import itertools
import weakref

from pion.protocol import errors
from pion.protocol.errors import ReplyError
from pion.server.args import parse_int
from pion.server.component import Component
from pion.server.context import Ctx
from pion.server.registry import command
from pion.storage.hash_value import NO_EXPIRE, HashValue
from pion.storage.keyspace import now_ms

#: HFE_MAX_ABS_TIME_MSEC: the largest absolute field expiry Redis accepts, (2**48 - 1) >> 2
MAX_EXPIRE_MS = ((1 << 48) - 1) >> 2
NO_FIELD, NO_TTL, CONDITION_FAILED, UPDATED, DELETED = -2, -1, 0, 1, 2
_CONDITIONS = (b"nx", b"xx", b"gt", b"lt")
_NUMFIELDS_POSITIVE = "ERR Number of fields must be a positive integer"
#: server -> heap of (due ms, tie, database, key, hash) for the active sweep
_SCHEDULES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_TIE = itertools.count()
#: at most this many hashes are swept per cron tick, so a tick stays short
_SWEEP_BATCH = 500


def clock(ctx: Ctx) -> int:
    """Now in ms for field expiry; -1 while loading, so that nothing expires during replay."""
    return -1 if ctx.server.loading or getattr(ctx.db, "loading", False) else now_ms()


def log(ctx: Ctx, argv: list[bytes]) -> None:
    """Log ``argv`` as (one of) this command's effects, after any lazy-expiry HDEL."""
    if ctx.rewritten:
        ctx.propagate(argv)
    else:
        ctx.rewrite(argv)


def load(ctx: Ctx, key: bytes) -> HashValue | None:
    """The hash at ``key`` with its due fields removed (and logged); None if absent or emptied."""
    value = ctx.db.get_typed(key, HashValue)
    if value is not None and value.ttls:
        expired = value.purge(clock(ctx))
        if expired:
            log(ctx, [b"HDEL", key, *expired])
            ctx.dirty(len(expired))
            ctx.notify("h", "hexpired", key)
            if not value.fields:
                ctx.db.delete(key)
                ctx.notify("g", "del", key)
                return None
            ctx.db.signal(key)
        if value.ttls and value.next_expire < value.scheduled:
            schedule(ctx, key, value)
    return value


# -- active sweep ----------------------------------------------------------------------------


def schedule(ctx: Ctx, key: bytes, value: HashValue) -> None:
    """Put the hash on its server's sweep heap at its next field expiry (hooks the cron once)."""
    server = ctx.server
    heap = _SCHEDULES.get(server)
    if heap is None:
        heap = _SCHEDULES[server] = []
        server.add_component(FieldExpirySweep(server))
    value.scheduled = value.next_expire
    heapq.heappush(heap, (value.next_expire, next(_TIE), ctx.db, key, value))


class FieldExpirySweep(Component):
    """The cron's part for hash fields (added at the first field TTL): ``sweep`` below."""

    name = "hash-field-expiry"

    def __init__(self, server) -> None:
        self.server = server

    def cron(self) -> None:
        sweep(self.server)


def sweep(server) -> None:
    """Cron: expire the due fields of hashes nobody touched; log them as HDEL."""
    heap = _SCHEDULES.get(server)
    if not heap or server.loading or server.slices.active:  # a query in slices holds expiry (server/slices.py)
        return
    now, logged = now_ms(), False
    for _ in range(_SWEEP_BATCH):
        if not heap or heap[0][0] > now:
            break
        _, _, db, key, value = heapq.heappop(heap)
        if value.scheduled <= now:
            value.scheduled = NO_EXPIRE
        if getattr(db, "loading", False) or db.data.get(key) is not value:
            continue  # gone, replaced or renamed: lazy expiry covers it where it lives now
        logged = _expire_fields(server, db, key, value, now) or logged
        if value.ttls and value.fields and value.next_expire < value.scheduled:
            value.scheduled = value.next_expire
            heapq.heappush(heap, (value.next_expire, next(_TIE), db, key, value))
    if logged:
        server.dispatcher.finish_command(None)


def _expire_fields(server, db, key: bytes, value: HashValue, now: int) -> bool:
    expired = value.purge(now)
    if not expired:
        return False
    server.dirty += len(expired)
    server.dispatcher.pending.append((getattr(db, "id", db.index), [b"HDEL", key, *expired]))
    notify = server.pubsub.notify_keyspace_event if server.notify_flags else None
    if notify is not None:
        notify("h", "hexpired", key, db.id)  # the id routes a tenant's events to its hub
    if value.fields:
        db.signal(key)
    else:
        db.delete(key)
        if notify is not None:
            notify("g", "del", key, db.id)
    return True


def _fields(argv: list[bytes], at: int, count_error: str) -> list[bytes]:
    """``FIELDS numfields field ...`` with ``numfields`` at ``at``: Redis's checks and texts."""
    if argv[at - 1].lower() != b"fields":
        raise ReplyError("ERR Mandatory argument FIELDS is missing or not at the right position")
    count = parse_int(argv[at], count_error) if at < len(argv) else 0
    if count < 1:
        raise ReplyError(count_error)
    if count != len(argv) - at - 1:
        raise ReplyError("ERR The `numfields` parameter must match the number of arguments")
    return argv[at + 1 :]


def _expire_time(argv: list[bytes], name: str, seconds: bool, relative: bool) -> int:
    """The absolute expiry in ms from argv[2], with Redis's range checks."""
    return parse_expire(argv[2], name, seconds, relative)


def parse_expire(raw: bytes, name: str, seconds: bool, relative: bool) -> int:
    """Redis's parseExpireTime for field TTLs: an absolute time in ms from ``raw`` (seconds or ms,
    relative to now or absolute), >= 0 and at most HFE_MAX_ABS_TIME_MSEC."""
    amount = parse_int(raw)
    if amount < 0:
        raise ReplyError("ERR invalid expire time, must be >= 0")
    if seconds:
        if amount > MAX_EXPIRE_MS // 1000:
            raise ReplyError(errors.INVALID_EXPIRE.format(name))
        amount *= 1000
    base = now_ms() if relative else 0
    if amount > MAX_EXPIRE_MS - base:
        raise ReplyError(errors.INVALID_EXPIRE.format(name))
    return amount + base


def _set_one(value: HashValue, field: bytes, when: int, condition: bytes | None, now: int) -> int:
    if field not in value.fields:
        return NO_FIELD
    previous = value.ttls.get(field)
    if previous is None:
        if condition in (b"xx", b"gt"):
            return CONDITION_FAILED
    elif (condition == b"nx" or (condition == b"gt" and previous >= when)
          or (condition == b"lt" and previous <= when)):
        return CONDITION_FAILED
    if when <= now:
        value.remove(field)
        return DELETED
    value.set_ttl(field, when)
    return UPDATED


def _hexpire(ctx: Ctx, argv: list[bytes], seconds: bool, relative: bool) -> list[int]:
    key, name = argv[1], argv[0].decode("latin-1").lower()
    value = load(ctx, key)
    when = _expire_time(argv, name, seconds, relative)
    condition = argv[3].lower() if argv[3].lower() in _CONDITIONS else None
    fields = _fields(argv, 5 if condition else 4, "ERR Parameter `numFields` should be greater than 0")
    if value is None:
        return [NO_FIELD] * len(fields)
    value.allow_ttls()
    now = clock(ctx)
    replies = [_set_one(value, field, when, condition, now) for field in fields]
    deleted = [f for f, r in zip(fields, replies, strict=True) if r == DELETED]
    updated = [f for f, r in zip(fields, replies, strict=True) if r == UPDATED]
    if deleted or updated:
        _after_hexpire(ctx, key, value, deleted, updated, when)
    return replies


def _after_hexpire(ctx: Ctx, key: bytes, value: HashValue, deleted: list[bytes], updated: list[bytes],
                   when: int) -> None:
    ctx.dirty(len(deleted) + len(updated))
    if deleted:
        log(ctx, [b"HDEL", key, *deleted])
    if updated:
        log(ctx, [b"HPEXPIREAT", key, str(when).encode(), b"FIELDS", str(len(updated)).encode(), *updated])
        if value.next_expire < value.scheduled:
            schedule(ctx, key, value)
    if not value.fields:
        ctx.db.delete(key)
        ctx.notify("h", "hdel", key)
        ctx.notify("g", "del", key)
    else:
        ctx.db.signal(key)
        ctx.notify("h", "hdel" if deleted else "hexpire", key)


_EXPIRE_FLAGS = dict(flags="write denyoom fast", keys=(1, 1, 1), categories="@write @hash @fast",
                     group="hash", since="7.4.0")
_TTL_FLAGS = dict(flags="readonly fast", keys=(1, 1, 1), categories="@read @hash @fast", group="hash",
                  since="7.4.0")


@command("HEXPIRE", -6, **_EXPIRE_FLAGS)
def hexpire(ctx: Ctx, argv: list[bytes]):
    """HEXPIRE key seconds [NX | XX | GT | LT] FIELDS numfields field [field ...]"""
    return _hexpire(ctx, argv, seconds=True, relative=True)


@command("HPEXPIRE", -6, **_EXPIRE_FLAGS)
def hpexpire(ctx: Ctx, argv: list[bytes]):
    """HPEXPIRE key milliseconds [NX | XX | GT | LT] FIELDS numfields field [field ...]"""
    return _hexpire(ctx, argv, seconds=False, relative=True)


@command("HEXPIREAT", -6, **_EXPIRE_FLAGS)
def hexpireat(ctx: Ctx, argv: list[bytes]):
    """HEXPIREAT key unix-time-seconds [NX | XX | GT | LT] FIELDS numfields field [field ...]"""
    return _hexpire(ctx, argv, seconds=True, relative=False)


@command("HPEXPIREAT", -6, **_EXPIRE_FLAGS)
def hpexpireat(ctx: Ctx, argv: list[bytes]):
    """HPEXPIREAT key unix-time-milliseconds [NX | XX | GT | LT] FIELDS numfields field [field ...]"""
    return _hexpire(ctx, argv, seconds=False, relative=False)


def _httl(ctx: Ctx, argv: list[bytes], seconds: bool, relative: bool) -> list[int]:
    value = load(ctx, argv[1])
    fields = _fields(argv, 3, _NUMFIELDS_POSITIVE)
    if value is None:
        return [NO_FIELD] * len(fields)
    base = now_ms() if relative else 0
    replies = []
    for field in fields:
        when = value.ttls.get(field)
        if field not in value.fields:
            replies.append(NO_FIELD)
        elif when is None:
            replies.append(NO_TTL)
        else:
            replies.append((when + 999 - base) // 1000 if seconds else when - base)
    return replies


@command("HTTL", -5, **_TTL_FLAGS)
def httl(ctx: Ctx, argv: list[bytes]):
    """HTTL key FIELDS numfields field [field ...]"""
    return _httl(ctx, argv, seconds=True, relative=True)


@command("HPTTL", -5, **_TTL_FLAGS)
def hpttl(ctx: Ctx, argv: list[bytes]):
    """HPTTL key FIELDS numfields field [field ...]"""
    return _httl(ctx, argv, seconds=False, relative=True)


@command("HEXPIRETIME", -5, **_TTL_FLAGS)
def hexpiretime(ctx: Ctx, argv: list[bytes]):
    """HEXPIRETIME key FIELDS numfields field [field ...]"""
    return _httl(ctx, argv, seconds=True, relative=False)


@command("HPEXPIRETIME", -5, **_TTL_FLAGS)
def hpexpiretime(ctx: Ctx, argv: list[bytes]):
    """HPEXPIRETIME key FIELDS numfields field [field ...]"""
    return _httl(ctx, argv, seconds=False, relative=False)


@command("HPERSIST", -5, "write fast", keys=(1, 1, 1), categories="@write @hash @fast", group="hash", since="7.4.0")
def hpersist(ctx: Ctx, argv: list[bytes]):
    """HPERSIST key FIELDS numfields field [field ...]"""
    key = argv[1]
    value = load(ctx, key)
    fields = _fields(argv, 3, _NUMFIELDS_POSITIVE)
    if value is None:
        return [NO_FIELD] * len(fields)
    replies = []
    for field in fields:
        if field not in value.fields:
            replies.append(NO_FIELD)
        else:
            replies.append(UPDATED if value.clear_ttl(field) else NO_TTL)
    if UPDATED in replies:
        ctx.dirty()
        ctx.db.signal(key)
        ctx.notify("h", "hpersist", key)
        log(ctx, argv)
    return replies
