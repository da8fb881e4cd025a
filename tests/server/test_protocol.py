"""The connection with raw bytes: pipelining, partial frames, big values, protocol errors,
flow control for clients that do not read."""

import socket
import time

import redis


def test_big_bulk_split_across_reads(raw):
    value = b"x" * (3 * 1024 * 1024)
    frame = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$%d\r\n%s\r\n" % (len(value), value)
    for i in range(0, len(frame), 65536):
        raw.send(frame[i : i + 65536])
    assert raw.read_exactly(b"+OK\r\n") == b"+OK\r\n"
    raw.cmd("STRLEN", "k") if False else raw.cmd("GET", "k")
    expected = b"$%d\r\n%s\r\n" % (len(value), value)
    assert raw.read_exactly(expected) == expected


def test_byte_at_a_time(raw):
    for byte in b"*2\r\n$4\r\nECHO\r\n$5\r\nhello\r\n":
        raw.send(bytes([byte]))
    assert raw.read_exactly(b"$5\r\nhello\r\n") == b"$5\r\nhello\r\n"


def test_many_pipelined_commands_one_write(raw):
    raw.send(b"".join(b"*3\r\n$3\r\nSET\r\n$2\r\nk%d\r\n$1\r\nv\r\n" % (i % 10) for i in range(1000)))
    assert raw.read_exactly(b"+OK\r\n" * 1000) == b"+OK\r\n" * 1000


def test_inline_commands(raw):
    raw.send(b"PING\r\nECHO 'a b'\r\n\r\n")
    assert raw.read_exactly(b"+PONG\r\n$3\r\na b\r\n") == b"+PONG\r\n$3\r\na b\r\n"


def test_unbalanced_quotes_is_protocol_error(raw):
    raw.send(b'ECHO "abc\r\n')
    assert raw.read_some().startswith(b"-ERR Protocol error: unbalanced quotes in request")
    assert raw.is_closed()


def test_protocol_error_does_not_hurt_other_clients(server, raw):
    good = redis.Redis(port=server.port)
    good.set("k", "v")
    raw.send(b"*2\r\n$3\r\nGET\r\n:1\r\n")
    assert raw.read_some().startswith(b"-ERR Protocol error")
    assert good.get("k") == b"v"


def test_client_that_never_reads_does_not_block_others(server):
    hog = socket.create_connection(("127.0.0.1", server.port))
    hog.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    value = b"v" * 100_000
    good = redis.Redis(port=server.port)
    good.set("big", value)
    request = b"*2\r\n$3\r\nGET\r\n$3\r\nbig\r\n" * 200_000  # asks for ~20 GB of replies
    hog.setblocking(False)
    sent = 0
    deadline = time.time() + 3
    while sent < len(request) and time.time() < deadline:
        try:
            sent += hog.send(request[sent:])
        except BlockingIOError:
            time.sleep(0.01)
    assert sent < len(request), "server should have stopped reading from a client that does not read"
    assert good.ping() is True
    held = server.call(lambda: max(c.conn.out_size + c.conn.reader.buffered() for c in server.server.clients.values()))
    assert held < 64 * 1024 * 1024
    hog.close()


# -- found by Redis's own test suite (docs/redis-test-suite.md) -------------------------------------


def test_a_multibulk_header_of_no_arguments_is_skipped(raw):
    raw.send(b"*-10\r\n*-1\r\n*0\r\n*1\r\n$4\r\nPING\r\n")
    assert raw.read_exactly(b"+PONG\r\n") == b"+PONG\r\n"


def test_out_of_range_headers_are_refused_before_their_payload_arrives(server):
    cases = [
        (b"*3000000000\r\n", b"invalid multibulk length"),
        (b"*3\r\n$3\r\nSET\r\n$1\r\nx\r\n$2000000000\r\n", b"invalid bulk length"),
        (b"*3\r\n$3\r\nSET\r\n$1\r\nx\r\n$-10\r\n", b"invalid bulk length"),
        (b"*3\r\n$3\r\nSET\r\n$1\r\nx\r\n$blabla\r\n", b"invalid bulk length"),
        (b"*3\r\n$3\r\nSET\r\n$1\r\nx\r\nfooz\r\n", b"expected '$', got 'f'"),
    ]
    for frame, text in cases:
        with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
            sock.sendall(frame)
            expected = b"-ERR Protocol error: " + text + b"\r\n"
            data = b""
            while len(data) < len(expected):
                chunk = sock.recv(4096)
                if not chunk:
                    break
                data += chunk
            assert data == expected, frame


def test_a_multibulk_count_line_without_end_is_refused(server):
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
        sock.sendall(b"*\x00")
        reply = b""
        try:
            for _ in range(400):
                sock.sendall(b"payload" * 150)
        except OSError:
            pass
        try:
            while not reply.endswith(b"\r\n"):
                chunk = sock.recv(4096)
                if not chunk:
                    break
                reply += chunk
        except OSError:
            pass
        assert reply.startswith(b"-ERR Protocol error: too big mbulk count string")
