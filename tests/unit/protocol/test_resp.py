"""Reply encoding per protocol version, and the request reader (sans-IO)."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pion.protocol.errors import ProtocolError, ReplyError
from pion.protocol.reader import RequestReader, split_inline
from pion.protocol.resp import NULL_ARRAY, OK, Pairs, Push, Replies, Status, Verbatim, encode


@pytest.mark.parametrize(
    ("value", "resp2", "resp3"),
    [
        (OK, b"+OK\r\n", b"+OK\r\n"),
        (b"ab", b"$2\r\nab\r\n", b"$2\r\nab\r\n"),
        (None, b"$-1\r\n", b"_\r\n"),
        (NULL_ARRAY, b"*-1\r\n", b"_\r\n"),
        (5, b":5\r\n", b":5\r\n"),
        (-7, b":-7\r\n", b":-7\r\n"),
        (True, b":1\r\n", b"#t\r\n"),
        (1.5, b"$3\r\n1.5\r\n", b",1.5\r\n"),
        (float("inf"), b"$3\r\ninf\r\n", b",inf\r\n"),
        (float("-inf"), b"$4\r\n-inf\r\n", b",-inf\r\n"),
        (0.1, b"$19\r\n0.10000000000000001\r\n", b",0.10000000000000001\r\n"),
        ({b"a": 1}, b"*2\r\n$1\r\na\r\n:1\r\n", b"%1\r\n$1\r\na\r\n:1\r\n"),
        ({b"x"}, b"*1\r\n$1\r\nx\r\n", b"~1\r\n$1\r\nx\r\n"),
        (Pairs([(b"m", 1.0)]), b"*2\r\n$1\r\nm\r\n$1\r\n1\r\n", b"*1\r\n*2\r\n$1\r\nm\r\n,1\r\n"),
        (Push([b"message"]), b"*1\r\n$7\r\nmessage\r\n", b">1\r\n$7\r\nmessage\r\n"),
        (Verbatim("hi"), b"$2\r\nhi\r\n", b"=6\r\ntxt:hi\r\n"),
        (ReplyError("ERR bad\r\nthing"), b"-ERR bad  thing\r\n", b"-ERR bad  thing\r\n"),
        (Replies([OK, 1]), b"+OK\r\n:1\r\n", b"+OK\r\n:1\r\n"),
        ([b"a", [1, None]], b"*2\r\n$1\r\na\r\n*2\r\n:1\r\n$-1\r\n", b"*2\r\n$1\r\na\r\n*2\r\n:1\r\n_\r\n"),
        (Status("QUEUED"), b"+QUEUED\r\n", b"+QUEUED\r\n"),
    ],
)
def test_encode_per_protocol(value, resp2, resp3):
    assert encode(value, 2) == resp2
    assert encode(value, 3) == resp3


def _frame(args):
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)


def _drain(reader):
    out = []
    while (cmd := reader.next_command()) is not None:
        out.append(cmd)
    return out


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.lists(st.binary(max_size=40), min_size=1, max_size=5), min_size=1, max_size=6),
    st.integers(min_value=1, max_value=17),
)
def test_reader_reassembles_frames_split_anywhere(commands, chunk):
    data = b"".join(_frame(c) for c in commands)
    reader = RequestReader()
    got = []
    for i in range(0, len(data), chunk):
        reader.feed(data[i : i + chunk])
        got += _drain(reader)
    assert got == commands


def test_inline_after_multibulk_in_one_buffer():
    reader = RequestReader()
    reader.feed(_frame([b"SET", b"k", b"v"]) + b"PING\r\n" + _frame([b"GET", b"k"]) + b"ECHO hi\n")
    assert _drain(reader) == [[b"SET", b"k", b"v"], [b"PING"], [b"GET", b"k"], [b"ECHO", b"hi"]]


def test_inline_quoting_rules():
    assert split_inline(b'SET "a b" \'c d\' "x\\ny" "\\x41"') == [b"SET", b"a b", b"c d", b"x\ny", b"A"]
    with pytest.raises(ProtocolError):
        split_inline(b'SET "unbalanced')


def test_non_bulk_element_is_a_protocol_error():
    reader = RequestReader()
    reader.feed(b"*1\r\n:1\r\n")
    with pytest.raises(ProtocolError):
        reader.next_command()


def test_bulk_over_limit_is_refused():
    reader = RequestReader(max_bulk_len=4)
    reader.feed(_frame([b"SET", b"k", b"12345"]))
    with pytest.raises(ProtocolError):
        reader.next_command()
