"""Expiry through redis-py in RESP2 and RESP3: EXPIRE PEXPIRE EXPIREAT PEXPIREAT with NX XX GT
LT, TTL PTTL EXPIRETIME PEXPIRETIME PERSIST, error texts, what gets logged, lazy expiry for
every command and active expiry of keys nobody reads."""

from __future__ import annotations

import time

import redis

from pion.storage.keyspace import Database
from tests.compat.test_keys import err, record_journal

FAR_S = 4102444800  # 2100-01-01


def test_expire_sets_ttl_and_reports(rr):
    rr.set("k", "v")
    assert rr.expire("k", 100) is True
    assert 99 <= rr.ttl("k") <= 100
    assert 99_000 <= rr.pttl("k") <= 100_000
    assert rr.expire("missing", 100) is False


def test_pexpire_expireat_pexpireat(rr):
    rr.set("k", "v")
    assert rr.pexpire("k", 50_000) is True
    assert 49_000 <= rr.pttl("k") <= 50_000
    assert rr.expireat("k", FAR_S) is True
    assert rr.expiretime("k") == FAR_S
    assert rr.pexpiretime("k") == FAR_S * 1000
    assert rr.pexpireat("k", FAR_S * 1000 + 1500) is True
    assert rr.pexpiretime("k") == FAR_S * 1000 + 1500
    assert rr.expiretime("k") == FAR_S + 2  # rounds to nearest, as (ms + 500) / 1000


def test_ttl_of_missing_and_persistent_keys(rr):
    assert [rr.ttl("m"), rr.pttl("m"), rr.expiretime("m"), rr.pexpiretime("m")] == [-2] * 4
    rr.set("k", "v")
    assert [rr.ttl("k"), rr.pttl("k"), rr.expiretime("k"), rr.pexpiretime("k")] == [-1] * 4


def test_ttl_rounds_to_nearest_second(rr):
    rr.set("k", "v", px=1600)
    assert rr.ttl("k") == 2
    rr.set("k", "v", px=1400)
    assert rr.ttl("k") == 1


def test_nx_xx_gt_lt(rr):
    rr.set("k", "v")
    assert rr.expire("k", 100, xx=True) is False
    assert rr.expire("k", 100, gt=True) is False  # no TTL counts as infinite
    assert rr.expire("k", 100, lt=True) is True
    assert rr.expire("k", 200, nx=True) is False
    assert rr.expire("k", 200, lt=True) is False
    assert rr.expire("k", 50, gt=True) is False
    assert rr.expire("k", 200, gt=True) is True
    assert rr.expire("k", 300, xx=True) is True
    assert 299 <= rr.ttl("k") <= 300
    assert rr.execute_command("EXPIRE", "k", "10", "xx", "lt") == 1


def test_expire_option_errors(rr):
    rr.set("k", "v")
    nx_text = "NX and XX, GT or LT options at the same time are not compatible"
    assert err(rr, "EXPIRE", "k", "10", "NX", "XX") == nx_text
    assert err(rr, "EXPIRE", "k", "10", "NX", "GT") == nx_text
    assert err(rr, "PEXPIRE", "k", "10", "LT", "NX") == nx_text
    assert err(rr, "EXPIRE", "k", "10", "GT", "LT") == "GT and LT options at the same time are not compatible"
    assert err(rr, "EXPIRE", "k", "10", "FOO") == "Unsupported option FOO"
    assert err(rr, "EXPIRE", "k", "x", "NX", "XX") == nx_text  # options are checked first
    assert err(rr, "EXPIRE", "k", "x") == "value is not an integer or out of range"
    assert err(rr, "EXPIRE", "k") == "wrong number of arguments for 'expire' command"


def test_expire_overflow_errors(rr):
    rr.set("k", "v")
    assert err(rr, "EXPIRE", "k", "9223372036854775807") == "invalid expire time in 'expire' command"
    assert err(rr, "EXPIRE", "k", "92233720368547758") == "invalid expire time in 'expire' command"
    assert err(rr, "PEXPIRE", "k", "9223372036854775807") == "invalid expire time in 'pexpire' command"
    assert err(rr, "EXPIREAT", "k", "9223372036854776") == "invalid expire time in 'expireat' command"
    assert err(rr, "EXPIRE", "missing", "9223372036854775807") == "invalid expire time in 'expire' command"
    assert rr.expireat("k", 9223372036854775) is True  # fits: stays
    assert rr.exists("k") == 1


def test_expire_in_the_past_deletes_and_logs_del(server, r):
    records = record_journal(server)
    r.set("k", "v")
    assert r.expire("k", -1) is True
    assert r.exists("k") == 0
    r.set("k", "v")
    assert r.pexpireat("k", 1) is True
    assert r.exists("k") == 0
    r.set("k", "v")
    assert r.execute_command("EXPIRE", "k", "-9223372036854775") == 1
    dels = [argv for rec in records for _, argv in rec if argv[0] == b"DEL"]
    assert dels == [[b"DEL", b"k"]] * 3


def test_relative_expires_are_logged_as_absolute(server, r):
    records = record_journal(server)
    r.set("k", "v")
    before = int(time.time() * 1000)
    r.expire("k", 100)
    r.pexpire("k", 5000, gt=True)  # fails: nothing logged
    r.expireat("k", FAR_S)
    r.pexpireat("k", FAR_S * 1000 + 7)
    logged = [argv for rec in records for _, argv in rec][1:]
    assert [argv[0] for argv in logged] == [b"PEXPIREAT"] * 3
    assert before + 100_000 <= int(logged[0][2]) <= int(time.time() * 1000) + 100_000
    assert logged[1] == [b"PEXPIREAT", b"k", b"%d" % (FAR_S * 1000)]
    assert logged[2] == [b"PEXPIREAT", b"k", b"%d" % (FAR_S * 1000 + 7)]


def test_persist(rr):
    rr.set("k", "v", ex=100)
    assert rr.persist("k") is True
    assert rr.ttl("k") == -1
    assert rr.persist("k") is False
    assert rr.persist("missing") is False


def test_set_clears_ttl_and_expired_keys_vanish_for_every_command(rr):
    rr.set("k", "v", ex=100)
    rr.set("k", "w")
    assert rr.ttl("k") == -1
    for name in ("a", "b", "c", "d", "e", "f", "g"):
        rr.set(name, "v", px=1)
    time.sleep(0.01)
    assert rr.get("a") is None
    assert rr.exists("b") == 0
    assert rr.type("c") == b"none"
    assert rr.ttl("d") == -2
    assert rr.expire("e", 100) is False
    assert rr.persist("f") is False
    assert rr.object("encoding", "g") is None
    assert rr.dbsize() == 1  # only "k": every expired key was removed on access


def test_keyspace_events_for_generic_writes(make_server):
    srv = make_server(notify_keyspace_events="KEg")
    client = redis.Redis(port=srv.port)
    sub = redis.Redis(port=srv.port).pubsub()
    sub.psubscribe("__keyevent@0__:*")
    assert sub.get_message(timeout=2)["type"] == "psubscribe"
    client.set("k", "v")
    client.expire("k", 100)
    client.persist("k")
    client.rename("k", "j")
    client.copy("j", "c")
    client.move("c", 1)
    client.expire("j", -1)
    events = []
    while len(events) < 8:
        msg = sub.get_message(timeout=2)
        if msg is None:
            break
        if msg["type"] == "pmessage":
            events.append((msg["channel"].split(b":")[-1], msg["data"]))
    assert events == [
        (b"expire", b"k"), (b"persist", b"k"), (b"rename_from", b"k"), (b"rename_to", b"j"),
        (b"copy_to", b"c"), (b"move_from", b"c"), (b"del", b"j"),
    ]
    sub.close()
    client.close()


def test_active_expiry_removes_keys_nobody_reads(server, r):
    r.mset({f"k{i}": i for i in range(200)})
    for i in range(200):
        r.pexpire(f"k{i}", 30)
    r.set("keep", 1)
    deadline = time.time() + 5
    while r.dbsize() > 1 and time.time() < deadline:
        time.sleep(0.05)
    assert r.dbsize() == 1
    assert server.server.stat_expired >= 190


def test_expiry_sampling_stays_in_step(server, r):
    """The sampling pool survives TTLs set, removed and set again, and keys deleted."""
    keys = [f"k{i}" for i in range(100)]
    for _ in range(3):
        r.mset({key: 1 for key in keys})  # clears every TTL
        for key in keys:
            r.pexpire(key, 100_000)
        for key in keys[0::2]:
            r.persist(key)
    r.delete(*keys[1::4])
    for key in keys[3::4]:
        r.pexpire(key, 20)
    for key in keys[0::4]:
        r.pexpire(key, 100_000)
    deadline = time.time() + 5
    while r.dbsize() > 50 and time.time() < deadline:
        time.sleep(0.05)
    assert r.dbsize() == 50  # the odd keys were deleted or expired on their own
    db = server.server.dbs[0]
    batch = server.call(db.sample_expiring, 20)
    assert len(batch) == len(set(batch)) == 20
    assert set(batch) <= {key.encode() for key in keys[0::4]}


def test_expiry_sampling_does_not_walk_the_keys():
    """Sampling is O(sample): once in step, drawing never iterates the TTL table."""

    class CountingDict(dict):
        walks = 0

        def __iter__(self):
            CountingDict.walks += 1
            return super().__iter__()

    db = Database(0)
    for i in range(2000):
        db.set(b"k%d" % i, b"v")
        db.set_expire(b"k%d" % i, 2**62)
    db.sample_expiring(20)
    db.expires = CountingDict(db.expires)
    for _ in range(100):
        assert len(set(db.sample_expiring(20))) == 20
    assert CountingDict.walks == 0


def test_sweep_removes_expired_keys_and_reports_them():
    db = Database(0)
    removed: list[bytes] = []
    db.on_expired = lambda _db, key: removed.append(key)
    for i in range(500):
        db.set(b"k%d" % i, b"v")
        db.set_expire(b"k%d" % i, 1 if i % 2 else 2**62)
    for _ in range(200):
        db.sweep_expired()
    assert len(db) == 250 and len(removed) == 250
    assert all(int(key[1:]) % 2 for key in removed)
