"""ROLE, INFO replication, WAIT, WAITAOF and the SYNC/PSYNC/REPLCONF handshake, as a Redis master
without replicas answers them (differential against redis-server where 7.0 has the command).
Replication itself (two and three servers) is tested in tests/server/test_replication.py."""

from __future__ import annotations

import subprocess
import threading
import time

import pytest
import redis


def test_role_and_info_replication_agree(r):
    assert r.execute_command("ROLE") == [b"master", 0, []]
    info = r.info("replication")
    assert info["role"] == "master" and info["connected_slaves"] == 0 and info["master_repl_offset"] == 0


def test_wait_without_replicas(r):
    assert r.execute_command("WAIT", 0, 0) == 0
    assert r.execute_command("WAIT", -1, 0) == 0
    started = time.monotonic()
    assert r.execute_command("WAIT", 1, 100) == 0  # waits its timeout: no replica will ever ack
    assert time.monotonic() - started >= 0.09
    with pytest.raises(redis.ResponseError, match="timeout is negative"):
        r.execute_command("WAIT", 1, -1)
    with pytest.raises(redis.ResponseError, match="value is not an integer or out of range"):
        r.execute_command("WAIT", "a", 0)


def test_wait_inside_multi_answers_at_once(r):
    pipe = r.pipeline(transaction=True)
    pipe.set("k", "v")
    pipe.execute_command("WAIT", 1, 0)
    assert pipe.execute() == [True, 0]


def test_wait_forever_is_ended_by_client_unblock(server, r):
    waiter = redis.Redis(port=server.port, socket_timeout=10)
    my_id = waiter.client_id()
    result: list = []
    thread = threading.Thread(target=lambda: result.append(waiter.execute_command("WAIT", 1, 0)))
    thread.start()
    deadline = time.time() + 5
    while time.time() < deadline and not any(c["id"] == str(my_id) and c["cmd"] == "wait" for c in r.client_list()):
        time.sleep(0.01)
    assert r.client_unblock(my_id) == 1
    thread.join(5)
    assert result == [0]
    waiter.close()


@pytest.mark.parametrize("policy", ["always", "everysec"])
def test_waitaof_reports_the_local_fsync(make_server, policy):
    srv = make_server(appendfsync=policy)
    c = redis.Redis(port=srv.port, socket_timeout=10)
    c.set("k", "v")
    assert c.execute_command("WAITAOF", 1, 0, 3000) == [1, 0]
    assert c.execute_command("WAITAOF", 0, 0, 0) == [1, 0]
    started = time.monotonic()
    assert c.execute_command("WAITAOF", 1, 1, 100) == [1, 0]  # no replica: waits its timeout
    assert time.monotonic() - started >= 0.09
    c.close()


def test_waitaof_without_fsync_waits_for_its_timeout(make_server):
    srv = make_server(appendfsync="no")
    c = redis.Redis(port=srv.port, socket_timeout=10)
    c.set("k", "v")
    assert c.execute_command("WAITAOF", 1, 0, 50) == [0, 0]
    c.close()


def test_waitaof_errors(make_server, r):
    with pytest.raises(redis.ResponseError, match="value must between 0 and 1"):
        r.execute_command("WAITAOF", 2, 0, 0)
    with pytest.raises(redis.ResponseError, match="must be positive"):
        r.execute_command("WAITAOF", 0, -1, 0)
    with pytest.raises(redis.ResponseError, match="timeout is negative"):
        r.execute_command("WAITAOF", 0, 0, -5)
    off = redis.Redis(port=make_server(appendonly=False).port)
    with pytest.raises(redis.ResponseError, match="numlocal is set but appendonly is disabled"):
        off.execute_command("WAITAOF", 1, 0, 0)
    assert off.execute_command("WAITAOF", 0, 0, 0) == [0, 0]
    off.close()


def test_replconf_handshake_options(r):
    assert r.execute_command("REPLCONF", "listening-port", "6380") == b"OK"
    assert r.execute_command("REPLCONF", "capa", "eof", "capa", "psync2") == b"OK"
    assert r.execute_command("REPLCONF", "rdb-only", "1") == b"OK"
    with pytest.raises(redis.ResponseError, match="^Unrecognized REPLCONF option: bogus$"):
        r.execute_command("REPLCONF", "bogus", "1")
    with pytest.raises(redis.ResponseError, match="^syntax error$"):
        r.execute_command("REPLCONF", "listening-port")
    with pytest.raises(redis.ResponseError, match="only read back from a replica's own log"):
        r.execute_command("REPLCONF", "PION-OFFSET", "id", "1", "0")


def test_psync_answers_fullresync_and_pion_payload(server, r):
    import socket

    r.set("k", "v")
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    sock.sendall(b"PSYNC ? -1\r\n")
    data = b""
    while data.count(b"\r\n") < 2 or b"PIONSYNC1" not in data:
        chunk = sock.recv(65536)
        assert chunk, data
        data += chunk
    first, second = data.split(b"\r\n")[:2]
    words = first.split()
    assert words[0] == b"+FULLRESYNC" and len(words[1]) == 40 and int(words[2]) >= 0
    assert second.startswith(b"$") and data.split(b"\r\n", 2)[2].startswith(b"PIONSYNC1")
    assert r.info("replication")["connected_slaves"] == 1
    sock.close()


def test_redis_cli_rdb_receives_pions_own_payload(server, tmp_path):
    cli = subprocess.run(["redis-cli", "-p", str(server.port), "--rdb", str(tmp_path / "dump.rdb")],
                         capture_output=True, text=True, timeout=20)
    assert cli.returncode == 0, cli.stdout + cli.stderr
    assert (tmp_path / "dump.rdb").read_bytes().startswith(b"PIONSYNC1")  # not an RDB: docs/replication.md


def test_wait_matches_redis(redis_ref, r):
    ref = redis.Redis(port=redis_ref.port)
    for argv in (("WAIT", 0, 0), ("WAIT", 1, 20), ("WAIT", -3, 0)):
        assert r.execute_command(*argv) == ref.execute_command(*argv)
    assert r.execute_command("ROLE") == ref.execute_command("ROLE")
    ref.close()
