"""Large array replies made in pieces (``pion.protocol.streamed``): the *RANDMEMBER/HRANDFIELD
negative counts and long LRANGE/ZRANGE replies answer what Redis answers, in both protocols,
keep their place in a pipeline, and stay bounded by client-output-buffer-limit."""

from __future__ import annotations

import socket
import time
from collections import Counter

import redis

from pion.protocol.streamed import STREAM_MIN

BIG = STREAM_MIN + 12345


def test_srandmember_negative_count(rr):
    members = [f"m{i}".encode() for i in range(100)]
    rr.sadd("s", *members)
    picks = rr.srandmember("s", -BIG)
    assert len(picks) == BIG and set(picks) <= set(members)
    counts = Counter(picks)
    assert len(counts) == 100 and min(counts.values()) > BIG / 100 / 3  # every member, roughly uniform
    # inside MULTI the reply is built at once, the same shape
    pipe = rr.pipeline(transaction=True)
    pipe.srandmember("s", -BIG)
    (inner,) = pipe.execute()
    assert len(inner) == BIG and set(inner) <= set(members)


def test_zrandmember_and_hrandfield_with_values(rr):
    rr.zadd("z", {f"m{i}": i + 0.5 for i in range(50)})
    rr.hset("h", mapping={f"f{i}": f"v{i}" for i in range(50)})
    raw_z = rr.execute_command("ZRANDMEMBER", "z", -BIG, "WITHSCORES")
    raw_h = rr.execute_command("HRANDFIELD", "h", -BIG, "WITHVALUES")
    if rr.protocol_version == 3:
        assert len(raw_z) == BIG and all(len(p) == 2 for p in raw_z)
        assert all(float(score) == int(m[1:]) + 0.5 for m, score in raw_z)
        assert all(v == b"v" + f[1:] for f, v in raw_h) and len(raw_h) == BIG
    else:
        assert len(raw_z) == 2 * BIG
        assert all(float(raw_z[i + 1]) == int(raw_z[i][1:]) + 0.5 for i in range(0, len(raw_z), 2))
        assert len(raw_h) == 2 * BIG and all(raw_h[i + 1] == b"v" + raw_h[i][1:] for i in range(0, len(raw_h), 2))
    plain = rr.execute_command("ZRANDMEMBER", "z", -BIG)
    assert len(plain) == BIG and all(m.startswith(b"m") for m in plain)


def test_vrandmember_negative_count(rr):
    for i in range(20):
        rr.execute_command("VADD", "vs", "VALUES", "2", i, 1, f"e{i}")
    picks = rr.execute_command("VRANDMEMBER", "vs", -BIG)
    assert len(picks) == BIG and set(picks) == {f"e{i}".encode() for i in range(20)}


def test_long_ranges_and_pipeline_order(rr):
    values = [f"v{i}".encode() for i in range(BIG)]
    for start in range(0, BIG, 10000):
        rr.rpush("l", *values[start:start + 10000])
    rr.zadd("zz", {f"m{i:06d}": i for i in range(BIG)})
    pipe = rr.pipeline(transaction=False)
    pipe.lrange("l", 0, -1)
    pipe.ping()
    pipe.zrange("zz", 0, -1, withscores=True)
    pipe.llen("l")
    got_list, pong, got_z, length = pipe.execute()
    assert got_list == values and pong is True and length == BIG
    assert len(got_z) == BIG and list(got_z[0]) == [b"m000000", 0.0]
    assert list(got_z[-1]) == [f"m{BIG - 1:06d}".encode(), BIG - 1.0]


def test_reply_off_skips_a_streamed_reply(server):
    sock = socket.create_connection(("127.0.0.1", server.port))
    try:
        r = redis.Redis(port=server.port)
        r.sadd("s", "a", "b")
        sock.sendall(b"CLIENT REPLY OFF\r\nSRANDMEMBER s -%d\r\nCLIENT REPLY ON\r\nPING\r\n" % BIG)
        sock.settimeout(10)
        data = b""
        while not data.endswith(b"+PONG\r\n"):
            data += sock.recv(65536)
        assert data == b"+OK\r\n+PONG\r\n"
    finally:
        sock.close()


def test_output_limit_closes_a_client_that_does_not_read(make_server):
    srv = make_server()
    r = redis.Redis(port=srv.port)
    r.sadd("s", *[f"member-{i}" for i in range(1000)])
    r.config_set("client-output-buffer-limit", "normal 262144 0 0")
    sock = socket.create_connection(("127.0.0.1", srv.port))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    try:
        sock.sendall(b"SRANDMEMBER s -5000000\r\n")
        deadline = time.time() + 20
        closed = False
        while time.time() < deadline:
            clients = r.client_list()
            if len(clients) == 1:  # only r itself: the non-reading client was dropped
                closed = True
                break
            time.sleep(0.1)
        assert closed
        assert r.ping()
    finally:
        sock.close()


def test_unlimited_client_holds_bounded_output(make_server):
    """With no limit (normal 0 0 0, Redis's default) a client that does not read is kept, but its
    reply is not made ahead of the socket: the server holds about the write buffer's high-water
    mark for it, not the reply's 60+ MB."""
    srv = make_server()
    r = redis.Redis(port=srv.port)
    r.sadd("s", *[f"member-{i}" for i in range(1000)])
    sock = socket.create_connection(("127.0.0.1", srv.port))
    try:
        sock.sendall(b"SRANDMEMBER s -5000000\r\n")
        time.sleep(1.0)

        def held() -> list[int]:
            return [c.conn.transport.get_write_buffer_size() + c.conn.out_size
                    for c in srv.server.clients.values() if c.conn is not None and c.conn.streaming is not None]

        sizes = srv.call(held)
        assert len(sizes) == 1 and sizes[0] < 4 * 1024 * 1024, sizes
        assert r.ping()
        sock.settimeout(10)
        assert sock.recv(16).startswith(b"*5000000\r\n$")  # the reply is there to read
    finally:
        sock.close()


def test_long_range_with_long_and_odd_elements(rr):
    values = [f"v{i}".encode() for i in range(BIG)]
    values[5] = b"x" * 5000  # longer than the looked-up headers: that piece is formatted per element
    values[PIECE_OFFSET] = b""
    for start in range(0, BIG, 10000):
        rr.rpush("l", *values[start:start + 10000])
    assert rr.lrange("l", 0, -1) == values
    assert rr.lrange("l", 1, -2) == values[1:-1]


PIECE_OFFSET = STREAM_MIN // 2 + 1


def test_client_gone_mid_stream_and_concurrent_streams(server):
    r = redis.Redis(port=server.port, socket_timeout=30)
    r.sadd("s", *[f"m{i}" for i in range(500)])
    for _ in range(3):  # the reader goes away after the first bytes: the stream stops, nothing leaks
        sock = socket.create_connection(("127.0.0.1", server.port))
        sock.sendall(b"SRANDMEMBER s -3000000\r\n")
        assert sock.recv(64).startswith(b"*3000000\r\n")
        sock.close()
    others = [redis.Redis(port=server.port, socket_timeout=30) for _ in range(3)]
    import threading

    results: list[int] = []

    def fetch(client: redis.Redis) -> None:
        results.append(len(client.srandmember("s", -BIG)))

    threads = [threading.Thread(target=fetch, args=(c,)) for c in others]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert results == [BIG] * 3
    deadline = time.time() + 10
    while time.time() < deadline and server.call(lambda: sum(
            1 for c in server.server.clients.values() if c.conn is not None and c.conn.streaming is not None)):
        time.sleep(0.05)
    assert server.call(lambda: [c.id for c in server.server.clients.values()
                                if c.conn is not None and c.conn.streaming is not None]) == []
    assert r.ping()


def test_streamed_reply_after_a_write_in_the_same_pipeline(make_server):
    srv = make_server(appendfsync="always")
    r = redis.Redis(port=srv.port, socket_timeout=30)
    values = [b"%d" % i for i in range(BIG)]
    for start in range(0, BIG, 10000):
        r.rpush("l", *values[start:start + 10000])
    pipe = r.pipeline(transaction=False)
    pipe.rpush("l", b"last")  # the reply after it waits for the log record: so does the stream
    pipe.lrange("l", 0, -1)
    pipe.sadd("s", "a")
    pipe.srandmember("s", -BIG)
    pipe.ping()
    pushed, got, added, picks, pong = pipe.execute()
    assert pushed == BIG + 1 and got == values + [b"last"] and added == 1 and picks == [b"a"] * BIG and pong
