"""Reply encoding for RESP2 and RESP3.

Handlers return plain Python values; this module is the one place that knows how each value
looks on the wire in each protocol version, so no handler ever branches on the version.

    bytes/bytearray/memoryview -> bulk string      str subclass Status -> simple string
    int -> integer    bool -> RESP3 boolean / RESP2 integer    float -> RESP3 double / RESP2 bulk
    None -> null ($-1 in RESP2, _ in RESP3)        NULL_ARRAY -> *-1 in RESP2, _ in RESP3
    list/tuple -> array    dict -> map (RESP2: flat array)    set/frozenset -> set (RESP2: array)
    Pairs -> RESP3 array of 2-element arrays, RESP2 flat array (ZRANGE WITHSCORES, ...)
    Push -> RESP3 push (>), RESP2 array           Verbatim -> RESP3 verbatim (=), RESP2 bulk
    Payloads -> array (of large payloads, written without copying them)
    Streamed -> array produced in pieces (``pion.protocol.streamed``; whole if encoded here)
    BulkParts -> one bulk string made of its pieces, written without copying them (MOE.EXPERT.FETCH)
    SetReply -> RESP3 set keeping its order (COMMAND INFO), RESP2 array
    Replies -> several replies back to back (SUBSCRIBE confirms each channel)
    KeyedArrays -> RESP3 map, RESP2 array of [key, value] pairs (XREAD)
    HumanDouble -> RESP3 double with the given digits, RESP2 bulk (GEOPOS coordinates)
    ReplyError -> error

``encode_vectored`` is what a connection uses: a large bulk string, or a ``Payloads`` array (a
K/V batch fetch), comes back as a list of buffers, the payloads themselves, for
``transport.writelines``, instead of one joined copy; any other reply is ``encode``'s.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Any

from pion.protocol.errors import ReplyError


class Status(str):
    """A simple-string reply (``+OK``)."""

    __slots__ = ()


class Verbatim(str):
    """A verbatim text reply (INFO, CLIENT LIST): ``=`` in RESP3, a bulk string in RESP2."""

    __slots__ = ()


class Push(list):
    """An out-of-band push (pub/sub messages): ``>`` in RESP3, an array in RESP2."""

    __slots__ = ()


class Pairs(list):
    """Pairs shown nested in RESP3 and flattened in RESP2 (``ZRANGE ... WITHSCORES``)."""

    __slots__ = ()


class KeyedArrays(dict):
    """A map in RESP3 but an array of [key, value] pairs in RESP2 (XREAD's reply)."""

    __slots__ = ()


class SetReply(list):
    """An ordered set (COMMAND INFO flags, key specs): ``~`` in RESP3, an array in RESP2.

    Unlike ``set`` it keeps its order and may hold unhashable items such as maps.
    """

    __slots__ = ()


class BigNumber(int):
    """A RESP3 big number (``(``), an integer-looking bulk string in RESP2."""

    __slots__ = ()


class Attribute(dict):
    """A RESP3 attribute map (``|``), sent ahead of the reply it describes inside ``Replies``;
    nothing at all in RESP2 (DEBUG PROTOCOL attrib)."""

    __slots__ = ()


class HumanDouble(bytes):
    """A double whose digits the handler wrote (GEOPOS's ``%.17Lf`` form): RESP3 ``,``, RESP2 bulk."""

    __slots__ = ()


class Replies(list):
    """Several replies to one command, sent back to back (SUBSCRIBE answers once per channel)."""

    __slots__ = ()


class Payloads(list):
    """An array of large bulk payloads (a K/V batch fetch, one per layer): an ordinary array on
    the wire, which ``encode_vectored`` writes without copying the payloads."""

    __slots__ = ()


class BulkParts(list):
    """One bulk string given as its pieces (small headers between large payloads): the wire
    form is the pieces joined, and ``encode_vectored`` writes the large ones without copying."""

    __slots__ = ()


class Vectored(list):
    """An encoded reply as its buffers (``encode_vectored``); ``nbytes`` is their total size."""

    nbytes = 0


class Streamed:
    """An array reply of ``count`` elements whose encoding ``make(proto)`` yields in pieces
    (``pion.protocol.streamed``). ``count`` is the RESP3 element count; with ``pairs`` it is
    doubled in RESP2 (pairs shown flat there, as ``Pairs``)."""

    __slots__ = ("count", "make", "pairs")

    def __init__(self, count: int, make: Callable[[int], Iterator[bytes]], pairs: bool = False) -> None:
        self.count = count
        self.make = make
        self.pairs = pairs

    def header(self, proto: int) -> bytes:
        return b"*%d\r\n" % (self.count * 2 if self.pairs and proto < 3 else self.count)

    def encode(self, proto: int) -> bytes:
        """The whole reply at once (a caller that cannot stream)."""
        return self.header(proto) + b"".join(self.make(proto))


class _NullArray:
    __slots__ = ()

    def __repr__(self) -> str:
        return "NULL_ARRAY"


NULL_ARRAY = _NullArray()
OK = Status("OK")
QUEUED = Status("QUEUED")
PONG = Status("PONG")

_OK_BYTES = b"+OK\r\n"
_NULL2 = b"$-1\r\n"
_NULL3 = b"_\r\n"
_SMALL_INTS = [b":%d\r\n" % i for i in range(-1, 256)]


def format_double(value: float) -> bytes:
    """Redis 7.0's ``%.17g`` with its spellings of infinity and NaN."""
    if math.isinf(value):
        return b"inf" if value > 0 else b"-inf"
    if math.isnan(value):
        return b"nan"
    return b"%.17g" % value


def encode_error(message: str) -> bytes:
    return b"-" + message.replace("\r", " ").replace("\n", " ").encode("utf-8", "replace") + b"\r\n"


def encode(value: Any, proto: int) -> bytes:
    """Encode one reply. Fast paths first: most replies are OK, a bulk string, an int or null."""
    if value is OK:
        return _OK_BYTES
    cls = value.__class__
    if cls is bytes:
        return b"$%d\r\n%s\r\n" % (len(value), value)
    if cls is int:
        return _SMALL_INTS[value + 1] if -1 <= value < 255 else b":%d\r\n" % value
    if value is None:
        return _NULL3 if proto == 3 else _NULL2
    out: list[bytes] = []
    _encode_into(value, proto, out)
    return b"".join(out)


#: a reply with at least this many bytes is written as its buffers, not joined into one
VECTORED_MIN = 256 * 1024
#: pieces at least this large are never copied into a joined run of small pieces
_BIG_PIECE = 64 * 1024


def encode_vectored(value: Any, proto: int) -> bytes | Vectored:
    """``encode``, except that a reply of ``VECTORED_MIN`` bytes or more comes back as a
    ``Vectored`` list: small pieces joined, large payloads as they are (zero copy)."""
    cls = value.__class__
    if cls is bytes:
        if len(value) < VECTORED_MIN:
            return b"$%d\r\n%s\r\n" % (len(value), value)
    elif cls is not Payloads and cls is not memoryview and cls is not bytearray and cls is not BulkParts:
        return encode(value, proto)
    out: list = []
    _encode_into(value, proto, out)
    return gather(out)


def gather(pieces: list) -> bytes | Vectored:
    """Join runs of small pieces; keep large ones; one ``bytes`` if no piece is large or the
    whole is small (the common case is decided in C, without a Python loop over the pieces)."""
    if max(map(len, pieces)) < _BIG_PIECE:
        return b"".join(pieces)
    total = 0
    runs = Vectored()
    run: list = []
    for piece in pieces:
        size = _size(piece)
        total += size
        if size < _BIG_PIECE:
            run.append(piece)
            continue
        if run:
            runs.append(b"".join(run))
            run = []
        runs.append(piece)
    if total < VECTORED_MIN:
        return b"".join(pieces)
    if run:
        runs.append(b"".join(run))
    runs.nbytes = total
    return runs


def _size(buf: Any) -> int:
    return buf.nbytes if buf.__class__ is memoryview else len(buf)


def _encode_into(value: Any, proto: int, out: list[bytes]) -> None:  # noqa: C901 - one switch
    cls = value.__class__
    if cls is bytes or cls is bytearray or cls is memoryview:
        out.append(b"$%d\r\n" % (value.nbytes if cls is memoryview else len(value)))
        out.append(value)  # join copies memoryviews once; no bytes() first
        out.append(b"\r\n")
    elif cls is int:
        out.append(b":%d\r\n" % value)
    elif cls is BulkParts:
        out.append(b"$%d\r\n" % sum(map(_size, value)))
        out.extend(value)
        out.append(b"\r\n")
    elif value is None:
        out.append(_NULL3 if proto == 3 else _NULL2)
    elif cls is Status:
        out.append(b"+" + value.encode() + b"\r\n")
    elif cls is list or cls is tuple or cls is Payloads:
        out.append(b"*%d\r\n" % len(value))
        for item in value:
            _encode_into(item, proto, out)
    elif cls is dict:
        out.append((b"%%%d\r\n" if proto == 3 else b"*%d\r\n") % (len(value) * (1 if proto == 3 else 2)))
        for key, item in value.items():
            _encode_into(key, proto, out)
            _encode_into(item, proto, out)
    elif cls is bool:
        if proto == 3:
            out.append(b"#t\r\n" if value else b"#f\r\n")
        else:
            out.append(b":1\r\n" if value else b":0\r\n")
    elif cls is float:
        text = format_double(value)
        out.append(b",%s\r\n" % text if proto == 3 else b"$%d\r\n%s\r\n" % (len(text), text))
    elif isinstance(value, ReplyError):
        out.append(encode_error(value.message))
    elif cls is Streamed:  # encoded whole: a caller that cannot stream it
        out.append(value.header(proto))
        out.extend(value.make(proto))
    elif cls is Pairs:
        if proto == 3:
            out.append(b"*%d\r\n" % len(value))
            for pair in value:
                _encode_into(list(pair), proto, out)
        else:
            out.append(b"*%d\r\n" % (2 * len(value)))
            for first, second in value:
                _encode_into(first, proto, out)
                _encode_into(second, proto, out)
    elif cls is KeyedArrays:
        out.append((b"%%%d\r\n" if proto == 3 else b"*%d\r\n") % len(value))
        for key, item in value.items():
            if proto != 3:
                out.append(b"*2\r\n")
            _encode_into(key, proto, out)
            _encode_into(item, proto, out)
    elif cls is Replies:
        for item in value:
            _encode_into(item, proto, out)
    elif cls is Push:
        out.append((b">%d\r\n" if proto == 3 else b"*%d\r\n") % len(value))
        for item in value:
            _encode_into(item, proto, out)
    elif cls is set or cls is frozenset or cls is SetReply:
        out.append((b"~%d\r\n" if proto == 3 else b"*%d\r\n") % len(value))
        for item in value:
            _encode_into(item, proto, out)
    elif value is NULL_ARRAY:
        out.append(_NULL3 if proto == 3 else b"*-1\r\n")
    elif cls is Verbatim:
        data = value.encode()
        if proto == 3:
            out.append(b"=%d\r\ntxt:%s\r\n" % (len(data) + 4, data))
        else:
            out.append(b"$%d\r\n%s\r\n" % (len(data), data))
    elif cls is HumanDouble:
        out.append(b",%s\r\n" % value if proto == 3 else b"$%d\r\n%s\r\n" % (len(value), value))
    elif cls is BigNumber:
        out.append(b"(%d\r\n" % value if proto == 3 else b"$%d\r\n%d\r\n" % (len(str(int(value))), value))
    elif cls is Attribute:
        if proto == 3:
            out.append(b"|%d\r\n" % len(value))
            for key, item in value.items():
                _encode_into(key, proto, out)
                _encode_into(item, proto, out)
    elif isinstance(value, str):
        data = value.encode()
        out.append(b"$%d\r\n%s\r\n" % (len(data), data))
    elif isinstance(value, int):
        out.append(b":%d\r\n" % value)
    elif isinstance(value, (list, tuple)):
        _encode_into(list(value), proto, out)
    else:
        raise TypeError(f"cannot encode reply of type {cls.__name__}")
