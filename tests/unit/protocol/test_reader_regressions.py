"""Inputs the coverage-guided fuzzer found that once escaped the reader as something other
than ProtocolError (the connection then got ``-ERR internal error`` and a logged traceback,
where Redis answers a protocol error and closes). Each stays here as a regression case."""

from __future__ import annotations

import socket

import pytest

from pion.protocol.errors import ProtocolError
from pion.protocol.reader import RequestReader
from tests.support.servers import ThreadServer, make_settings

#: a RESP3 map inside a request array whose key is an array: hiredis cannot hash it (TypeError)
MAP_WITH_ARRAY_KEY = b"*1\r\n%1\r\n*0\r\n*0\r\n"
#: the held bytes are malformed before the header walk starts (it raised before it existed)
MALFORMED_HELD = (b"0\r\r\n*-1\r\n%-1\r\n+\n1\x0b\x0b\x0b\x0b\n\xf9" + b"\xd2" * 77 + b"\xc900\r\n1\n\n\n\x0b"
                  b"\x0b\xf9\n*00\r\n1\n\n\n\x0b\x0b\n*0846744077\x807\x0e+\x0b")


def drain(reader: RequestReader, *parts: bytes) -> list[list[bytes]]:
    got = []
    for part in parts:
        reader.feed(part)
        while (argv := reader.next_command()) is not None:
            got.append(argv)
    return got


def test_a_map_with_an_array_key_is_a_protocol_error():
    with pytest.raises(ProtocolError, match="expected '\\$'"):
        drain(RequestReader(1 << 20), MAP_WITH_ARRAY_KEY)


def test_malformed_held_bytes_split_across_reads_are_a_protocol_error():
    with pytest.raises(ProtocolError):
        drain(RequestReader(1 << 20), MALFORMED_HELD[:63], MALFORMED_HELD[63:])


@pytest.mark.parametrize("payload", [MAP_WITH_ARRAY_KEY, b"PING\r\n" + MAP_WITH_ARRAY_KEY])
def test_the_server_answers_a_protocol_error_and_closes(tmp_path, payload):
    srv = ThreadServer(make_settings(tmp_path)).start()
    try:
        sock = socket.create_connection(("127.0.0.1", srv.port), timeout=5)
        sock.sendall(payload)
        data = b""
        while chunk := sock.recv(4096):
            data += chunk
        sock.close()
        assert data.endswith(b"-ERR Protocol error: expected '$', got something else\r\n"), data
        assert b"internal error" not in data
        assert data.startswith(b"+PONG\r\n") == payload.startswith(b"PING")
    finally:
        srv.stop()
