"""FT.SUGADD / FT.SUGGET / FT.SUGDEL / FT.SUGLEN: replies (the expected values are Redis Stack's,
RediSearch 2.10.5, recorded from the same commands), errors, and the dictionary as a key that is
persisted (log and snapshot), dumped and restored. The byte-for-byte comparison with a live Redis
Stack is ``stack_diff.py``'s ``suggest_*`` cases."""

from __future__ import annotations

import pytest
import redis

from tests.recovery.helpers import DirServer
from tests.support.servers import ProcessServer


def _fill(r: redis.Redis) -> None:
    r.execute_command("FT.SUGADD", "s", "hello world", 1)
    r.execute_command("FT.SUGADD", "s", "hello", 2, "PAYLOAD", "pl")
    r.execute_command("FT.SUGADD", "s", "help me", 3)


def test_scores_payloads_and_fuzzy(any_client):
    r = any_client
    _fill(r)
    assert r.execute_command("FT.SUGADD", "s", "hello", 1, "INCR") == 3
    assert r.execute_command("FT.SUGLEN", "s") == 3
    assert r.execute_command("FT.SUGGET", "s", "hel") == [b"hello", b"help me", b"hello world"]
    # score / sqrt(1 + letters past the prefix), as float32 (Redis Stack's digits)
    got = r.execute_command("FT.SUGGET", "s", "hel", "WITHSCORES", "WITHPAYLOADS")
    assert got[:3] == [b"hello", 1.7320507764816284 if r.protocol_version == 3 else b"1.7320507764816284", b"pl"]
    assert got[5] is None and got[6:8] == [b"hello world", 0.3333333432674408 if r.protocol_version == 3
                                             else b"0.3333333432674408"]
    fuzzy = r.execute_command("FT.SUGGET", "s", "helo", "FUZZY", "WITHSCORES")
    assert [fuzzy[0], fuzzy[2], fuzzy[4]] == [b"hello", b"help me", b"hello world"]
    assert float(fuzzy[1]) == pytest.approx(0.2870894968509674, rel=1e-12)
    # an exact match scores INT_MAX; the prefix is matched case-folded, the stored text kept
    r.execute_command("FT.SUGADD", "s", "Hello", 2)
    exact = r.execute_command("FT.SUGGET", "s", "hello", "WITHSCORES", "MAX", "2")
    assert exact[:2] == [b"hello", 2147483648.0 if r.protocol_version == 3 else b"2147483648"]
    assert r.execute_command("FT.SUGGET", "s", "HEL", "MAX", "10") == [b"hello", b"help me", b"Hello", b"hello world"]


def test_ties_follow_the_trie_and_heap(any_client):
    r = any_client
    for i in range(8):
        r.execute_command("FT.SUGADD", "t", f"same{i}", 1)
    assert r.execute_command("FT.SUGGET", "t", "sa") == [b"same3", b"same1", b"same0", b"same2", b"same4"]
    assert r.execute_command("FT.SUGGET", "t", "sa", "MAX", "3") == [b"same0", b"same1", b"same2"]
    for w in ("b", "a", "c"):
        r.execute_command("FT.SUGADD", "u", w, 1)
    assert r.execute_command("FT.SUGGET", "u", "") == [b"b", b"a", b"c"]
    assert r.execute_command("FT.SUGGET", "u", "a", "FUZZY") == [b"a", b"b", b"c"]


def test_delete_zero_scores_and_limits(any_client):
    r = any_client
    assert r.execute_command("FT.SUGADD", "k", "abc", 0) == 0  # a zero score adds nothing, the key exists
    assert r.exists("k") == 1 and r.type("k") in (b"trietype0", "trietype0")
    assert r.execute_command("FT.SUGADD", "k", "abc", 1) == 1
    assert r.execute_command("FT.SUGDEL", "k", "ABC") == 0  # deletes are exact
    assert r.execute_command("FT.SUGDEL", "k", "abc") == 1
    assert r.execute_command("FT.SUGDEL", "k", "abc") == 0
    assert r.execute_command("FT.SUGLEN", "k") == 0 and r.exists("k") == 1
    assert r.execute_command("FT.SUGGET", "k", "a") == []
    assert r.execute_command("FT.SUGGET", "nokey", "a") is None
    assert r.execute_command("FT.SUGLEN", "nokey") == 0 and r.execute_command("FT.SUGDEL", "nokey", "a") == 0
    assert r.execute_command("FT.SUGADD", "k", "a" * 600, 1) == 0  # too long: not kept
    for w in ("a1", "a2", "a3", "a4"):
        r.execute_command("FT.SUGADD", "m", w, 1)
    assert r.execute_command("FT.SUGGET", "m", "a", "MAX", "2.9") == [b"a1", b"a2"]  # MAX is truncated
    assert r.execute_command("FT.SUGGET", "m", "a", "MAX", "1e1") == [b"a3", b"a2", b"a1", b"a4"]


@pytest.mark.parametrize("args, message", [
    (("FT.SUGADD", "s", "a", "notnum"), "invalid score"),
    (("FT.SUGADD", "s", "a", "nan"), "invalid score"),
    (("FT.SUGADD", "s", "a", "1e400"), "invalid score"),
    (("FT.SUGADD", "s", "a", 1, "BAD"), "Unknown argument `BAD`"),
    (("FT.SUGADD", "s", "a", 1, "PAYLOAD"), "Invalid payload: Expected an argument, but none provided"),
    (("FT.SUGADD", "s", "a", 1, "PAYLOAD", "x", "PAYLOAD", "y"), "wrong number of arguments for 'FT.SUGADD'"),
    (("FT.SUGGET", "s", "a", "MAX", "0"), "MAX: Value is outside acceptable bounds"),
    (("FT.SUGGET", "s", "a", "MAX", "x"), "MAX: Could not convert argument to expected type"),
    (("FT.SUGGET", "s", "a", "MAX"), "MAX: Expected an argument, but none provided"),
    (("FT.SUGGET", "s", "a", "FOO"), "Unrecognized argument: FOO"),
    (("FT.SUGGET", "s", "a" * 100), "Invalid query"),
    (("FT.SUGGET", "s", "é" * 100), "Invalid query length"),
    (("FT.SUGGET", "s"), "wrong number of arguments for 'FT.SUGGET'"),
    (("FT.SUGADD", "str", "a", 1), "WRONGTYPE"),
    (("FT.SUGADD", "str", "a", "x"), "WRONGTYPE"),  # the type is checked before the score
    (("FT.SUGGET", "str", "a"), "WRONGTYPE"),
    (("FT.SUGLEN", "str"), "WRONGTYPE"),
    (("FT.SUGDEL", "str", "a"), "WRONGTYPE"),
])
def test_errors_change_nothing(r, args, message):
    r.set("str", "x")
    r.execute_command("FT.SUGADD", "s", "abc", 1)
    with pytest.raises(redis.ResponseError, match=message.replace("(", r"\(")):
        r.execute_command(*args)
    assert r.execute_command("FT.SUGLEN", "s") == 1 and r.get("str") == b"x"


def test_dump_restore_rename_and_flush(r):
    _fill(r)
    before = r.execute_command("FT.SUGGET", "s", "he", "WITHSCORES", "WITHPAYLOADS")
    payload = r.dump("s")
    r.restore("s2", 0, payload)
    assert r.execute_command("FT.SUGGET", "s2", "he", "WITHSCORES", "WITHPAYLOADS") == before
    r.rename("s2", "s3")
    assert r.execute_command("FT.SUGLEN", "s3") == 3
    r.flushall()
    assert r.execute_command("FT.SUGGET", "s", "he") is None


def test_survives_kill_9_and_snapshot_restart(tmp_path):
    srv = ProcessServer(tmp_path / "log").start()
    try:
        r = redis.Redis(port=srv.port, protocol=2, socket_timeout=20)
        _fill(r)
        r.execute_command("FT.SUGDEL", "s", "help me")
        r.execute_command("FT.SUGADD", "s", "hello", 5, "INCR")
        want = r.execute_command("FT.SUGGET", "s", "he", "WITHSCORES", "WITHPAYLOADS")
        srv.kill9()
        srv.start()
        r = redis.Redis(port=srv.port, protocol=2, socket_timeout=20)
        assert r.execute_command("FT.SUGGET", "s", "he", "WITHSCORES", "WITHPAYLOADS") == want
    finally:
        srv.stop()
    server = DirServer(tmp_path / "snap").start()
    try:
        r = server.client(protocol=2)
        _fill(r)
        want = r.execute_command("FT.SUGGET", "s", "h", "FUZZY", "WITHSCORES", "WITHPAYLOADS")
        assert r.save()
        server.restart()
        r = server.client(protocol=2)
        assert r.type("s") == b"trietype0"
        assert r.execute_command("FT.SUGGET", "s", "h", "FUZZY", "WITHSCORES", "WITHPAYLOADS") == want
    finally:
        server.stop()
