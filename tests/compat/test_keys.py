"""Generic key commands through redis-py in RESP2 and RESP3: DEL UNLINK EXISTS TYPE RENAME
RENAMENX COPY MOVE TOUCH KEYS SCAN RANDOMKEY DBSIZE FLUSHDB FLUSHALL SWAPDB, error texts
included, plus the SCAN guarantee under concurrent changes and WATCH invalidation."""

from __future__ import annotations

import random
import threading
import time

import pytest
import redis


def err(client: redis.Redis, *argv) -> str:
    with pytest.raises(redis.ResponseError) as exc:
        client.execute_command(*argv)
    return str(exc.value)


def needs(client: redis.Redis, *argv):
    """Run a command of another family (a failure there fails the test, never skips it)."""
    return client.execute_command(*argv)


def record_journal(server) -> list:
    """Capture what the server logs (one list of (db, argv) effects per command)."""
    records: list = []
    journal = server.server.journal
    original = journal.append

    def append(effects):
        records.append([(db, [bytes(a) for a in argv]) for db, argv in effects])
        return original(effects)

    server.call(setattr, journal, "append", append)
    return records


# -- DEL UNLINK EXISTS TOUCH TYPE -------------------------------------------------------


def test_del_and_unlink_count_removed_keys(rr):
    rr.mset({"a": 1, "b": 2, "c": 3})
    assert rr.delete("a", "b", "missing", "a") == 2
    assert rr.unlink("c", "c") == 1
    assert rr.exists("a", "b", "c") == 0


def test_exists_counts_a_key_each_time_it_is_named(rr):
    rr.set("a", 1)
    assert rr.exists("a", "a", "missing") == 2


def test_touch_counts_existing_keys(rr):
    rr.set("a", 1)
    assert rr.touch("a", "missing", "a") == 2


def test_type_names_each_kind(rr):
    rr.set("s", "v")
    assert rr.type("s") == b"string"
    assert rr.type("missing") == b"none"
    needs(rr, "SADD", "set", "m")
    assert rr.type("set") == b"set"


def test_arity_errors_name_the_command(r):
    for name in ("DEL", "EXISTS", "TOUCH", "UNLINK", "TYPE", "KEYS"):
        assert err(r, name) == f"wrong number of arguments for '{name.lower()}' command"


# -- RENAME RENAMENX ----------------------------------------------------------------------


def test_rename_moves_value_and_ttl(rr):
    rr.set("a", "v")
    rr.expire("a", 100)
    rr.set("b", "old")
    assert rr.rename("a", "b") is True
    assert rr.get("b") == b"v" and rr.exists("a") == 0
    assert 95 <= rr.ttl("b") <= 100


def test_rename_drops_destination_ttl_when_source_has_none(rr):
    rr.set("a", "v")
    rr.set("b", "old", ex=100)
    rr.rename("a", "b")
    assert rr.ttl("b") == -1


def test_rename_same_key_and_missing_key(rr):
    rr.set("a", "v")
    assert rr.rename("a", "a") is True
    assert rr.renamenx("a", "a") is False
    assert err(rr, "RENAME", "missing", "x") == "no such key"
    assert err(rr, "RENAMENX", "missing", "x") == "no such key"
    assert err(rr, "RENAME", "missing", "missing") == "no such key"


def test_renamenx_refuses_existing_destination(rr):
    rr.mset({"a": 1, "b": 2})
    assert rr.renamenx("a", "b") is False
    assert rr.renamenx("a", "c") is True
    assert rr.mget("a", "b", "c") == [None, b"2", b"1"]


def test_rename_of_expired_key_is_no_such_key(rr):
    rr.set("a", "v", px=1)
    time.sleep(0.01)
    assert err(rr, "RENAME", "a", "b") == "no such key"


# -- COPY MOVE ----------------------------------------------------------------------------


def test_copy_keeps_ttl_and_respects_replace(rr):
    rr.set("a", "v", ex=100)
    rr.set("b", "old")
    assert rr.copy("a", "b") is False
    assert rr.copy("a", "b", replace=True) is True
    assert rr.get("b") == b"v" and 95 <= rr.ttl("b") <= 100
    assert rr.copy("missing", "c") is False


def test_copy_to_another_db(rr):
    rr.set("a", "v")
    assert rr.copy("a", "a", destination_db=3) is True
    rr.execute_command("SELECT", 3)
    assert rr.get("a") == b"v"


def test_copy_errors(rr):
    rr.set("a", "v")
    assert err(rr, "COPY", "a", "a") == "source and destination objects are the same"
    assert err(rr, "COPY", "a", "a", "DB", "0") == "source and destination objects are the same"
    assert err(rr, "COPY", "a", "b", "DB") == "syntax error"
    assert err(rr, "COPY", "a", "b", "FOO") == "syntax error"
    assert err(rr, "COPY", "a", "b", "DB", "x") == "value is not an integer or out of range"
    assert err(rr, "COPY", "a", "b", "DB", "4294967296") == "value is not an integer or out of range"
    assert err(rr, "COPY", "a", "b", "DB", "16") == "DB index is out of range"
    assert err(rr, "COPY", "a", "b", "DB", "-1") == "DB index is out of range"


@pytest.mark.parametrize(("make", "grow", "size"), [
    (("SADD", "s", "a", "b"), ("SADD", "t", "c"), "SCARD"),
    (("RPUSH", "s", "a", "b"), ("RPUSH", "t", "c"), "LLEN"),
    (("ZADD", "s", "1", "a", "2", "b"), ("ZADD", "t", "3", "c"), "ZCARD"),
    (("HSET", "s", "a", "1", "b", "2"), ("HSET", "t", "c", "3"), "HLEN"),
])
def test_copy_of_a_container_is_independent(rr, make, grow, size):
    needs(rr, *make)
    assert rr.copy("s", "t") is True
    rr.execute_command(*grow)
    assert needs(rr, size, "s") == 2
    assert rr.execute_command(size, "t") == 3


def test_move_keeps_ttl_and_refuses_existing(rr):
    rr.set("a", "v", ex=100)
    assert rr.move("a", 1) is True
    assert rr.exists("a") == 0
    rr.set("a", "new")
    assert rr.move("a", 1) is False
    assert rr.move("missing", 1) is False
    rr.execute_command("SELECT", 1)
    assert rr.get("a") == b"v" and 95 <= rr.ttl("a") <= 100


def test_move_errors(rr):
    rr.set("a", "v")
    assert err(rr, "MOVE", "a", "0") == "source and destination objects are the same"
    assert err(rr, "MOVE", "a", "16") == "DB index is out of range"
    assert err(rr, "MOVE", "a", "-1") == "DB index is out of range"
    assert err(rr, "MOVE", "a", "x") == "value is not an integer or out of range"


# -- KEYS RANDOMKEY DBSIZE ---------------------------------------------------------------


def test_keys_matches_glob_and_hides_expired(rr):
    rr.mset({"user:1": 1, "user:2": 2, "other": 3})
    rr.set("user:3", 3, px=1)
    time.sleep(0.01)
    assert sorted(rr.keys("user:*")) == [b"user:1", b"user:2"]
    assert sorted(rr.keys("*")) == [b"other", b"user:1", b"user:2"]
    assert rr.keys("[") == []
    assert sorted(rr.keys("user:[^1]")) == [b"user:2"]


def test_randomkey(rr):
    assert rr.randomkey() is None
    rr.mset({"a": 1, "b": 2})
    seen = {rr.randomkey() for _ in range(50)}
    assert seen == {b"a", b"b"}


def test_randomkey_skips_and_removes_expired_keys(rr):
    for i in range(20):
        rr.set(f"gone{i}", 1, px=1)
    rr.set("live", 1)
    time.sleep(0.01)
    assert all(rr.randomkey() == b"live" for _ in range(5))


def test_dbsize_and_flushdb(rr):
    rr.mset({"a": 1, "b": 2})
    rr.execute_command("SELECT", 1)
    rr.set("c", 3)
    assert rr.dbsize() == 1
    assert rr.flushdb() is True
    assert rr.dbsize() == 0
    rr.execute_command("SELECT", 0)
    assert rr.dbsize() == 2


def test_flushall_and_flush_options(rr):
    rr.set("a", 1)
    assert rr.execute_command("FLUSHALL", "ASYNC") in (True, b"OK")
    assert rr.dbsize() == 0
    assert rr.execute_command("FLUSHDB", "sync") in (True, b"OK")
    assert err(rr, "FLUSHDB", "x") == "syntax error"
    assert err(rr, "FLUSHALL", "sync", "extra") == "syntax error"


def test_flush_is_logged_even_when_empty(server, r):
    records = record_journal(server)
    r.flushall()
    r.flushdb()
    assert [argv for rec in records for _, argv in rec] == [[b"FLUSHALL"], [b"FLUSHDB"]]


# -- SWAPDB and WATCH -------------------------------------------------------------------


def test_swapdb_swaps_contents_for_connected_clients(server, rr):
    other = redis.Redis(port=server.port, db=1)
    rr.set("a", "zero", ex=100)
    other.set("b", "one")
    assert rr.swapdb(0, 1) is True
    assert rr.get("a") is None and rr.get("b") == b"one"
    assert other.get("a") == b"zero" and 95 <= other.ttl("a") <= 100
    assert rr.swapdb(1, 1) is True
    other.close()


def test_swapdb_errors(rr):
    assert err(rr, "SWAPDB", "x", "1") == "invalid first DB index"
    assert err(rr, "SWAPDB", "0", "x") == "invalid second DB index"
    assert err(rr, "SWAPDB", "0", "16") == "DB index is out of range"
    assert err(rr, "SWAPDB", "-1", "0") == "DB index is out of range"


@pytest.mark.parametrize("command", [["FLUSHALL"], ["FLUSHDB"], ["SWAPDB", "0", "1"]])
def test_whole_db_commands_invalidate_watch(server, r, command):
    r.set("w", "1")
    with r.pipeline() as pipe:
        pipe.watch("w")
        redis.Redis(port=server.port).execute_command(*command)
        pipe.multi()
        pipe.set("w", "2")
        with pytest.raises(redis.WatchError):
            pipe.execute()


def test_swapdb_invalidates_watch_on_key_that_appears(server, r):
    redis.Redis(port=server.port, db=1).set("w", "x")
    with r.pipeline() as pipe:
        pipe.watch("w")
        r.swapdb(0, 1)
        pipe.multi()
        pipe.set("w", "2")
        with pytest.raises(redis.WatchError):
            pipe.execute()


def test_rename_invalidates_watch_on_both_keys(server, r):
    r.set("a", 1)
    for watched in ("a", "b"):
        r.set("a", 1)
        with r.pipeline() as pipe:
            pipe.watch(watched)
            redis.Redis(port=server.port).rename("a", "b")
            pipe.multi()
            pipe.get("a")
            with pytest.raises(redis.WatchError):
                pipe.execute()


def _blpop_in_thread(port: int, key: str) -> tuple[threading.Thread, dict]:
    box: dict = {}

    def wait() -> None:
        box["reply"] = redis.Redis(port=port, socket_timeout=10).blpop(key, 5)

    thread = threading.Thread(target=wait)
    thread.start()
    time.sleep(0.2)
    return thread, box


@pytest.mark.parametrize("how", ["swapdb", "rename", "move"])
def test_blocked_client_wakes_when_a_key_arrives(server, r, how):
    needs(r, "BLPOP", "nothing", "0.01")
    other = redis.Redis(port=server.port, db=1)
    other.rpush("q" if how != "rename" else "x", "item")
    thread, box = _blpop_in_thread(server.port, "q")
    if how == "swapdb":
        r.swapdb(0, 1)
    elif how == "rename":
        other.execute_command("MOVE", "x", "0")
        r.rename("x", "q")
    else:
        other.move("q", 0)
    thread.join(10)
    assert box["reply"] == (b"q", b"item")
    other.close()


# -- SCAN -------------------------------------------------------------------------------


def full_scan(client: redis.Redis, **options) -> list[bytes]:
    seen: list[bytes] = []
    cursor = 0
    while True:
        cursor, keys = client.scan(cursor, **options)
        seen.extend(keys)
        if cursor == 0:
            return seen


def test_scan_returns_every_key(rr):
    rr.mset({f"k{i}": i for i in range(300)})
    assert set(full_scan(rr, count=7)) == {f"k{i}".encode() for i in range(300)}


def test_scan_match_count_and_type(rr):
    rr.mset({"a1": 1, "a2": 2, "b1": 3})
    needs(rr, "SADD", "aset", "m")
    assert sorted(full_scan(rr, match="a*")) == [b"a1", b"a2", b"aset"]
    assert sorted(full_scan(rr, match="a*", _type="string")) == [b"a1", b"a2"]
    assert sorted(full_scan(rr, _type="SET")) == [b"aset"]
    assert full_scan(rr, _type="nosuchtype") == []


def test_scan_leaves_out_expired_keys(rr):
    rr.set("live", 1)
    rr.set("gone", 1, px=1)
    time.sleep(0.01)
    assert full_scan(rr) == [b"live"]


def test_scan_reply_shape_and_cursor_parsing(r, raw):
    r.set("k", 1)
    reply = b"*2\r\n$1\r\n0\r\n*1\r\n$1\r\nk\r\n"
    for cursor in ("0", "", "+0", "-0"):
        raw.cmd("SCAN", cursor)
        assert raw.read_exactly(reply) == reply, cursor
    assert r.scan(18446744073709551615)[0] == 0
    for bad in ("x", " 0", "0 ", "18446744073709551616", "1.5", "-", "0x1"):
        assert err(r, "SCAN", bad) == "invalid cursor", bad


def test_scan_option_errors(rr):
    assert err(rr, "SCAN", "0", "COUNT", "0") == "syntax error"
    assert err(rr, "SCAN", "0", "COUNT", "-1") == "syntax error"
    assert err(rr, "SCAN", "0", "COUNT", "x") == "value is not an integer or out of range"
    assert err(rr, "SCAN", "0", "MATCH") == "syntax error"
    assert err(rr, "SCAN", "0", "TYPE") == "syntax error"
    assert err(rr, "SCAN", "0", "FOO", "bar") == "syntax error"
    assert err(rr, "SCAN", "x", "FOO", "bar") == "invalid cursor"


def test_scan_guarantee_while_keys_come_and_go(r):
    """Keys present for the whole iteration are all returned, however many keys are added and
    removed between calls (the table grows fourfold and shrinks again on the way)."""
    rng = random.Random(7)
    stable = {f"stable:{i}".encode() for i in range(400)}
    r.mset({key: 1 for key in stable})
    churn: list[bytes] = []
    r.mset({f"churn:{i}": 1 for i in range(400)})
    churn.extend(f"churn:{i}".encode() for i in range(400))
    seen: set[bytes] = set()
    cursor, step = 0, 0
    while True:
        cursor, keys = r.scan(cursor, count=rng.choice([1, 5, 20]))
        seen.update(keys)
        step += 1
        if step < 40:  # grow: 60 new keys per call
            new = [f"grow:{step}:{i}".encode() for i in range(60)]
            r.mset({key: 1 for key in new})
            churn.extend(new)
        else:  # shrink: drop churn keys
            doomed = [churn.pop(rng.randrange(len(churn))) for _ in range(min(80, len(churn)))]
            if doomed:
                r.delete(*doomed)
        if cursor == 0:
            break
    assert stable <= seen
    assert all(key.startswith((b"stable:", b"churn:", b"grow:")) for key in seen)
