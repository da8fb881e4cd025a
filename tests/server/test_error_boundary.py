"""The dispatcher's error boundary (issue #13, item 2): any exception inside a command becomes an
error reply, never a dropped connection; a transaction's effects reach the log as one record with
its reply; manifests are parsed with a depth limit."""

from __future__ import annotations

import logging

import pytest
import redis
from tests.recovery.helpers import DirServer

NESTED = "[" * 30000 + "]" * 30000  # 60 KB: past Python's recursion limit in json.loads


@pytest.fixture
def node(tmp_path):
    srv = DirServer(tmp_path / "data").start()
    yield srv
    srv.stop()


def manifest_register(ns: str, manifest: str, token: str = "t1") -> list:
    """A manifest is registered through a staged store (issue #12): REGISTER ... MANIFEST ... STAGE."""
    return ["KV.PREFIX.REGISTER", ns, 64, "fp16", "MANIFEST", manifest, "STAGE", token]


def test_a_deeply_nested_manifest_is_refused_and_the_connection_stays(node):
    r = node.client()
    with pytest.raises(redis.ResponseError, match="nested deeper than"):
        r.execute_command(*manifest_register("ns", NESTED))
    assert r.ping() is True
    deep_but_fine = '{"n_layers": 1, "token_count": 1, "extra": ' + '{"a":' * 50 + "1" + "}" * 50 + "}"
    assert r.execute_command(*manifest_register("ns", deep_but_fine)) == b"OK"
    assert r.execute_command("KV.PREFIX.ABORT", "ns", "t1") == 1


def test_the_issue_transaction_is_all_or_nothing_and_survives_a_restart(node):
    """MULTI; SET a 1; INCR ctr; KV.PREFIX.REGISTER ... MANIFEST <nested>; SET b 1; EXEC: on main
    the connection died after a and ctr ran, b never did, and another client's write logged them."""
    r = node.client()
    pipe = r.pipeline(transaction=True)
    pipe.set("a", "1").incr("ctr").execute_command(*manifest_register("ns", NESTED)).set("b", "1")
    replies = pipe.execute(raise_on_error=False)
    assert replies[0] is True and replies[1] == 1 and replies[3] is True
    assert isinstance(replies[2], redis.ResponseError) and "nested" in str(replies[2])
    node.client().set("other", "x")
    node.restart()
    assert node.client().mget("a", "ctr", "b", "other") == [b"1", b"1", b"1", b"x"]


@pytest.fixture
def broken_echo(node, monkeypatch):
    """ECHO made to fail the way a bug would: an exception that is not a ReplyError."""
    spec = node.server.table.by_name[b"echo"]

    def crash(ctx, argv):
        raise RecursionError("maximum recursion depth exceeded while calling a Python object")

    monkeypatch.setattr(spec, "handler", crash)
    return spec


def test_an_unexpected_exception_answers_err_and_is_logged_once(node, broken_echo, caplog):
    r = node.client()
    caplog.set_level(logging.ERROR, logger="pion.dispatch")
    before = r.info("errorstats").get("errorstat_ERR", {}).get("count", 0)
    for _ in range(3):
        with pytest.raises(redis.ResponseError, match="^internal error in 'echo': RecursionError"):
            r.echo("x")
    assert r.ping() is True
    logged = [rec for rec in caplog.records if "internal error in 'echo'" in rec.getMessage()]
    assert len(logged) == 1 and logged[0].exc_info is not None
    assert r.info("errorstats")["errorstat_ERR"]["count"] == before + 3


def test_a_crash_inside_exec_leaves_the_rest_of_the_transaction_whole(node, broken_echo):
    r = node.client()
    pipe = r.pipeline(transaction=True)
    pipe.set("a", "1").echo("boom").incr("ctr").set("b", "2")
    replies = pipe.execute(raise_on_error=False)
    assert replies[0] is True and isinstance(replies[1], redis.ResponseError) and replies[2:] == [1, True]
    node.restart()
    assert node.client().mget("a", "ctr", "b") == [b"1", b"1", b"2"]


def test_a_crash_inside_a_script_is_a_script_error(node, broken_echo):
    r = node.client()
    got = r.eval("redis.call('SET', 'k', 'v'); local ok = redis.pcall('ECHO', 'x'); return ok['err']", 0)
    assert b"internal error in 'echo'" in got
    with pytest.raises(redis.ResponseError, match="internal error in 'echo'"):
        r.eval("return redis.call('ECHO', 'x')", 0)
    assert r.get("k") == b"v" and r.ping() is True


def test_pipelined_commands_after_a_crash_still_run(node, broken_echo):
    r = node.client()
    pipe = r.pipeline(transaction=False)
    pipe.set("p", "1").echo("x").incr("p")
    replies = pipe.execute(raise_on_error=False)
    assert replies[0] is True and isinstance(replies[1], redis.ResponseError) and replies[2] == 2


def test_a_bug_below_the_dispatcher_closes_only_that_connection(node, monkeypatch, caplog):
    """The connection's own boundary: an exception while parsing answers -ERR and closes that
    connection; the event loop logs no traceback per connection, other clients go on."""
    from tests.conftest import RawConnection

    from pion.protocol.reader import RequestReader

    def broken(self):
        raise KeyError("parser bug")

    caplog.set_level(logging.ERROR)
    other = node.client()
    assert other.ping()
    monkeypatch.setattr(RequestReader, "next_command", broken)
    for _ in range(3):
        raw = RawConnection(node.port)
        raw.send(b"PING\r\n")
        assert raw.read_some(3) == b"-ERR internal error: KeyError\r\n" and raw.is_closed()
        raw.close()
    monkeypatch.undo()
    assert other.ping()
    assert sum("after an internal error" in rec.getMessage() for rec in caplog.records) <= 1
    assert not [rec for rec in caplog.records if rec.name == "asyncio"]


def test_a_deeply_nested_artifact_is_refused_and_the_connection_stays(node):
    """KV.PREFIX.IMPORT parses a caller's JSON three times (header, codec lists, manifest): each
    with the depth limit, so a nested document is a clear error, not a RecursionError."""
    import struct

    import numpy as np

    from pion.codecs.artifact import Artifact, pack

    r = node.client()
    header = NESTED.encode()
    with pytest.raises(redis.ResponseError, match="header is not the expected JSON"):
        r.execute_command("KV.PREFIX.IMPORT", struct.pack("<Q", len(header)) + header)
    art = Artifact(ns=b"ns", kv_dim=64, vquant="fp16", manifest_raw=NESTED.encode(),
                   tokens=np.zeros(1, np.uint32), k_codecs=["fp16"], v_codecs=["fp16"], rows=[(b"\0" * 128, b"\0" * 128)])
    with pytest.raises(redis.ResponseError, match="manifest is not JSON"):
        r.execute_command("KV.PREFIX.IMPORT", pack(art))
    assert r.ping() is True and r.execute_command("KV.PREFIX.MANIFEST", "ns") is None
