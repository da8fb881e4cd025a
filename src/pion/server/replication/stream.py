"""The replication stream: each logged record as Redis-protocol commands, and the backlog.

Why this shape: a primary sends its replicas exactly what its write-ahead log records, the
*effects* of each command (deterministic: relative TTLs made absolute, SPOP as SREM), so a
replica applies them through the same replay path as recovery and reaches the same state. A
record of several effects (MULTI/EXEC, a script) is framed ``MULTI ... EXEC`` so the replica
applies and logs it as one record; a change of database is a ``SELECT`` of the server-wide
database id (tenants' databases included). Offsets count the bytes of this stream, as Redis's
``master_repl_offset`` does.

Large arguments (K/V row batches, big values) are not copied: the encoded record is a list of
chunks in which such an argument is the caller's own immutable buffer (an arena view stays a
view), and the same chunks go to every replica's socket and to the backlog.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator

#: arguments at least this long stay separate chunks (not joined into the small-bytes buffer)
BIG_ARG = 64 * 1024

Chunk = bytes | memoryview


def _frozen(arg: object) -> Chunk:
    """An argument as a buffer nobody will change: bytes and read-only views of bytes or of
    arena mappings are kept; anything mutable (a bytearray a handler built) is copied."""
    if arg.__class__ is bytes:
        return arg  # type: ignore[return-value]
    if arg.__class__ is memoryview and arg.readonly:  # type: ignore[union-attr]
        return arg  # type: ignore[return-value]
    return bytes(arg)  # type: ignore[call-overload]


class StreamEncoder:
    """Encodes records; remembers the database the stream last selected."""

    def __init__(self) -> None:
        self.db: int | None = None

    def reset(self) -> None:
        """A new stream (a full resync starts one): the next record selects its database."""
        self.db = None

    def record(self, effects: list[tuple[int, list]]) -> tuple[list[Chunk], int]:
        """The chunks of one record and their total length."""
        small = bytearray()
        chunks: list[Chunk] = []
        framed = len(effects) > 1
        if framed:
            small += b"*1\r\n$5\r\nMULTI\r\n"
        for db, argv in effects:
            if db != self.db:
                text = str(db).encode()
                small += b"*2\r\n$6\r\nSELECT\r\n$%d\r\n%s\r\n" % (len(text), text)
                self.db = db
            small += b"*%d\r\n" % len(argv)
            for arg in argv:
                size = len(arg) if arg.__class__ is not memoryview else arg.nbytes
                small += b"$%d\r\n" % size
                if size >= BIG_ARG:
                    chunks.append(bytes(small))
                    small = bytearray()
                    chunks.append(_frozen(arg))
                    small += b"\r\n"
                else:
                    small += arg
                    small += b"\r\n"
        if framed:
            small += b"*1\r\n$4\r\nEXEC\r\n"
        if small:
            chunks.append(bytes(small))
        total = 0
        for chunk in chunks:
            total += len(chunk) if chunk.__class__ is bytes else chunk.nbytes  # type: ignore[union-attr]
        return chunks, total


def command(*words: bytes) -> bytes:
    """One command in the stream (PING, REPLCONF GETACK)."""
    out = bytearray(b"*%d\r\n" % len(words))
    for word in words:
        out += b"$%d\r\n%s\r\n" % (len(word), word)
    return bytes(out)


class Backlog:
    """The last ``size`` bytes (at least) of the stream, as the chunks they were sent as.

    ``offset`` is the stream's length so far (Redis's master_repl_offset); the backlog holds
    bytes ``first .. offset`` (1-based as Redis: ``first`` is the first byte it still has).
    Whole chunks are dropped from the front, so it may hold a little more than ``size``.
    """

    def __init__(self, size: int, offset: int = 0) -> None:
        self.size = size
        self.offset = offset
        self._chunks: deque[tuple[int, Chunk]] = deque()  # (stream position before it, chunk)
        self._held = 0

    @property
    def first(self) -> int:
        return self._chunks[0][0] + 1 if self._chunks else self.offset + 1

    @property
    def histlen(self) -> int:
        return self._held

    def add(self, chunks: list[Chunk], total: int) -> None:
        position = self.offset
        for chunk in chunks:
            self._chunks.append((position, chunk))
            position += len(chunk) if chunk.__class__ is bytes else chunk.nbytes  # type: ignore[union-attr]
        self.offset += total
        self._held += total
        while self._chunks and self._held - _size(self._chunks[0][1]) >= self.size:
            self._held -= _size(self._chunks.popleft()[1])

    def can_serve(self, wanted: int) -> bool:
        """PSYNC asks for the stream from byte ``wanted`` (the replica's offset + 1)."""
        return self.first <= wanted <= self.offset + 1

    def since(self, wanted: int) -> Iterator[Chunk]:
        """The chunks from byte ``wanted`` to the end (the first one sliced as needed)."""
        start = wanted - 1
        for position, chunk in list(self._chunks):
            end = position + _size(chunk)
            if end <= start:
                continue
            if position < start:
                yield memoryview(chunk)[start - position:]
            else:
                yield chunk

    def resize(self, size: int) -> None:
        self.size = size
        while self._chunks and self._held - _size(self._chunks[0][1]) >= self.size:
            self._held -= _size(self._chunks.popleft()[1])


def _size(chunk: Chunk) -> int:
    return len(chunk) if chunk.__class__ is bytes else chunk.nbytes  # type: ignore[union-attr]
