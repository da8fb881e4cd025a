"""Large replies as lists of buffers: the payloads themselves, never copied into one string."""

from __future__ import annotations

import numpy as np

from pion.protocol.resp import VECTORED_MIN, Payloads, Vectored, encode, encode_vectored


def test_other_replies_are_one_bytes_as_before():
    for value in (b"x" * 100, [b"a", None, 3], {b"k": b"v"}, memoryview(b"abc"), [b"z" * VECTORED_MIN] * 2,
                  Payloads([b"small"])):
        for proto in (2, 3):
            assert encode_vectored(value, proto) == encode(value, proto)


def test_a_large_array_keeps_its_payloads_and_joins_only_the_small_pieces():
    big = np.arange(VECTORED_MIN, dtype=np.uint8)
    payloads = Payloads([memoryview(big).cast("B"), b"y" * VECTORED_MIN, None, b"small"])
    for proto in (2, 3):
        out = encode_vectored(payloads, proto)
        assert out.__class__ is Vectored
        assert out.nbytes == len(encode(payloads, proto)) == sum(memoryview(p).nbytes for p in out)
        assert b"".join(out) == encode(payloads, proto)
        assert any(piece is payloads[0] for piece in out) and any(piece is payloads[1] for piece in out)
        assert len(out) == 5  # header, payload, CRLF+header, payload, CRLF+nil+small bulk


def test_a_large_bulk_string_is_not_copied():
    value = b"z" * VECTORED_MIN
    out = encode_vectored(value, 2)
    assert list(out) == [b"$%d\r\n" % VECTORED_MIN, value, b"\r\n"] and out[1] is value
