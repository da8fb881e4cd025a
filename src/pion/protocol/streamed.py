"""Large array replies produced in pieces, so that one command never holds the event loop.

Why: ``SRANDMEMBER s -10000000`` or an ``LRANGE`` of millions is one command whose reply takes
seconds of Python to encode; encoded at once it stops every other client meanwhile and its
whole encoding sits in memory. A ``Streamed`` reply is the array's header and a generator of
its encoded elements, ``PIECE`` at a time. The connection writes one piece per turn of the
event loop and produces the next only once the transport has taken the last one (below its
high-water mark), so other clients are served between pieces and what the reply holds in
memory is bounded by the write buffer, whatever its size (``pion.server.net.connection``).

What a piece reads must not change meanwhile: every generator here works on a snapshot taken
when the command ran (a list of the members, immutable ``bytes``), never on the live value.

``sampled`` (the ``*RANDMEMBER``/``HRANDFIELD`` negative counts: picks with repetition) draws
indices with numpy and joins the pre-encoded members they name: one pass of C per piece, no
Python per element. ``pieces_of`` cuts an already built list (``LRANGE``, ``ZRANGE``, ...)
into pieces, each encoded as ``encode`` would.

A leaf of ``pion.protocol``: numpy is its only import outside the protocol package.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from pion.protocol.resp import Pairs, Streamed, _encode_into

#: elements per piece (a few milliseconds of encoding on a loaded machine)
PIECE = 8192
#: a list reply with at least this many elements is streamed rather than encoded at once
STREAM_MIN = 4 * PIECE
#: reply elements whose values cannot change after the command (safe to encode later)
_IMMUTABLE = frozenset((bytes, int, float, type(None), bool))


def bulk(value: bytes) -> bytes:
    return b"$%d\r\n%s\r\n" % (len(value), value)


#: ``$<n>`` for every length below this (bulk headers looked up, not formatted)
_SHORT = 4096
_HEADS = [b"$%d" % n for n in range(_SHORT)]


def bulk_array_body(part: Sequence[bytes]) -> bytes:
    """The elements of an array of bulk strings, encoded (no array header): with elements
    shorter than ``_SHORT`` the ``$<n>`` headers are looked up and headers and elements
    interleaved by two slice assignments, then joined by ``\r\n`` in one C pass (no Python
    per element: about twice as fast as formatting each one)."""
    parts: list = [None] * (2 * len(part))
    try:
        parts[::2] = map(_HEADS.__getitem__, map(len, part))
    except IndexError:  # an element of _SHORT bytes or more
        return b"".join([b"$%d\r\n%s\r\n" % (len(v), v) for v in part])
    parts[1::2] = part
    return b"\r\n".join(parts) + b"\r\n" if parts else b""


def _encode_pool(pool: Sequence[Any], proto: int, pairs: bool) -> Iterator[list[bytes]]:
    """The pool's members encoded, a piece at a time (a big pool is encoded across turns)."""
    for start in range(0, len(pool), PIECE):
        part = pool[start:start + PIECE]
        if not pairs:
            yield [bulk(m) for m in part]
            continue
        encoded = []
        for member, value in part:
            out: list[bytes] = [b"*2\r\n"] if proto >= 3 else []
            _encode_into(member, proto, out)
            _encode_into(value, proto, out)
            encoded.append(b"".join(out))
        yield encoded


def sampled(pool: Sequence[Any], count: int, pairs: bool = False) -> Streamed:
    """``count`` uniform picks with repetition from ``pool`` (a snapshot: bytes members, or
    (member, value) pairs shown as RESP3 pairs / flat in RESP2)."""

    def make(proto: int) -> Iterator[bytes]:
        import numpy as np

        rng = np.random.default_rng()
        encoded: list[bytes] = []
        for part in _encode_pool(pool, proto, pairs):
            encoded.extend(part)
            yield b""  # a turn of the loop between pieces of a big pool's encoding
        table = np.array(encoded, dtype=object)
        left = count
        while left > 0:
            n = min(PIECE * 4, left)  # picks are cheap: four pieces' worth per turn
            left -= n
            yield b"".join(table[rng.integers(0, len(table), size=n)].tolist())

    return Streamed(count, make, pairs)


def pieces_of(items: list | Pairs) -> Streamed | None:
    """A built list (or ``Pairs``) as a ``Streamed`` reply, or None when it is small or holds
    values that could change before a later piece is encoded (a mutable buffer, a nested
    value): those are encoded at once, as before."""
    n = len(items)
    if n < STREAM_MIN:
        return None
    if items.__class__ is Pairs:
        try:
            kinds = {type(x) for pair in items for x in pair}
        except TypeError:
            return None
        if not kinds <= _IMMUTABLE:
            return None

        def make_pairs(proto: int) -> Iterator[bytes]:
            for start in range(0, n, PIECE):
                out: list[bytes] = []
                for first, second in items[start:start + PIECE]:
                    if proto >= 3:
                        out.append(b"*2\r\n")
                    _encode_into(first, proto, out)
                    _encode_into(second, proto, out)
                yield b"".join(out)

        return Streamed(n, make_pairs, pairs=True)
    kinds = set(map(type, items))
    if not kinds <= _IMMUTABLE:
        return None
    only_bytes = kinds == {bytes}

    def make(proto: int) -> Iterator[bytes]:
        for start in range(0, n, PIECE):
            part = items[start:start + PIECE]
            if only_bytes:
                yield bulk_array_body(part)
            else:
                out: list[bytes] = []
                for item in part:
                    _encode_into(item, proto, out)
                yield b"".join(out)

    return Streamed(n, make)
