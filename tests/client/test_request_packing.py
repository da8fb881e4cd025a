"""PionClient sends large arguments as they are: no copy into one request buffer (the hiredis
packer's), so a 94 MB prefix store costs the client a socket write, not a 94 MB memcpy."""

from __future__ import annotations

import numpy as np

from pion.client import PionClient


def test_a_large_argument_is_sent_as_the_callers_own_buffer():
    client = PionClient("pion://127.0.0.1:1")  # no connection is opened to pack
    conn = client.redis.connection_pool.make_connection()
    rows = np.arange(300_000, dtype=np.float32)
    blob = memoryview(rows.view(np.uint8)).cast("B")
    chunks = conn.pack_commands([["V.STOREBATCH", "s_pk", 0, 0, 1000, blob, "FMT", "RAW"], ["PING"]])
    assert any(chunk is blob for chunk in chunks)  # the very buffer, not a copy
    wire = b"".join(bytes(chunk) for chunk in chunks)
    head = b"*8\r\n$12\r\nV.STOREBATCH\r\n$4\r\ns_pk\r\n$1\r\n0\r\n$1\r\n0\r\n$4\r\n1000\r\n$1200000\r\n"
    assert wire.startswith(head) and wire[len(head):len(head) + blob.nbytes] == blob.tobytes()
    assert wire.endswith(b"\r\n$3\r\nFMT\r\n$3\r\nRAW\r\n*1\r\n$4\r\nPING\r\n")
    client.close()
