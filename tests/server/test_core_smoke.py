"""The core slice end to end: connect, PING, SET/GET in both protocols, errors, pipelining."""

import pytest
import redis


def test_ping_and_set_get(rr):
    assert rr.ping() is True
    assert rr.set("k", "v") is True
    assert rr.get("k") == b"v"
    assert rr.get("missing") is None


def test_unknown_command_error_text(r):
    with pytest.raises(redis.ResponseError) as exc:
        r.execute_command("NOPE", "a", "b")
    assert str(exc.value) == "unknown command 'NOPE', with args beginning with: 'a' 'b' "


def test_wrong_arity_error_text(r):
    with pytest.raises(redis.ResponseError) as exc:
        r.execute_command("GET")
    assert str(exc.value) == "wrong number of arguments for 'get' command"


def test_hello3_reply_map(r3):
    info = r3.execute_command("HELLO", "3")
    assert info[b"proto"] == 3 if b"proto" in info else info["proto"] == 3


def test_pipelined_raw_bytes(raw):
    raw.send(b"*1\r\n$4\r\nPING\r\n" * 3 + b"PING\r\n")
    assert raw.read_exactly(b"+PONG\r\n" * 4) == b"+PONG\r\n" * 4


def test_protocol_error_closes_only_that_connection(server, raw):
    raw.send(b"*1\r\n:5\r\n")
    reply = raw.read_some()
    assert reply.startswith(b"-ERR Protocol error")
    assert raw.is_closed()
    other = redis.Redis(port=server.port)
    assert other.ping()
