"""One layer of a V-store session: encoded rows indexed by token position.

Rows are kept as the immutable chunks they arrived in: one ``bytes`` (a live store) or
``memoryview`` (a chunk of a mapped log arena on replay) per ``(start, count)``, never copied
into a growing buffer. Overwriting a range splits the chunks it overlaps into memoryview slices
of the same buffers. Reading a range that one chunk covers is a zero-copy slice; rows never
stored read as the codec's encoding of zeros (the reference zero-fills them too).
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass

from pion.codecs import Codec, get_codec


@dataclass(frozen=True, slots=True)
class LayerSpec:
    """What a layer holds: row width, codec name and (for the rope/fp8 hybrid) the rope dims."""

    dim: int
    fmt: str
    rope: int = 0

    def codec(self) -> Codec:
        return get_codec(self.fmt, self.rope)


class Chunk:
    """Rows ``[start, start+count)``, encoded, at byte ``offset`` of ``base`` (a whole stored blob).

    ``durable`` is the same blob's view in a log arena (or None): a snapshot references it
    instead of copying the bytes. A live store reads from ``base`` on the heap (first touches of
    a fresh mapping are slow); after a restart ``base`` is the arena view itself. A chunk never
    holds a sub-slice of an arena view, only the whole blob and an offset, so the arena can
    always name it by its ref.
    """

    __slots__ = ("start", "count", "base", "offset", "nbytes", "durable")

    def __init__(
        self, start: int, count: int, base: bytes | memoryview, offset: int = 0, nbytes: int = -1,
        durable: memoryview | None = None,
    ) -> None:
        self.start = start
        self.count = count
        self.base = base
        self.offset = offset
        self.nbytes = len(base) - offset if nbytes < 0 else nbytes
        self.durable = durable

    @property
    def end(self) -> int:
        return self.start + self.count

    @property
    def data(self) -> bytes | memoryview:
        """The chunk's bytes: the blob itself when the chunk is all of it, else a view."""
        if self.offset == 0 and self.nbytes == len(self.base):
            return self.base
        return memoryview(self.base)[self.offset:self.offset + self.nbytes]

    def part(self, start: int, end: int, row_bytes: int) -> Chunk:
        """Rows ``[start, end)`` of this chunk, sharing its blob."""
        offset = self.offset + (start - self.start) * row_bytes
        return Chunk(start, end - start, self.base, offset, (end - start) * row_bytes, self.durable)


class Layer:
    __slots__ = ("spec", "codec", "row_bytes", "zero_row", "chunks", "starts", "tokens", "rows", "nbytes", "seq")

    def __init__(self, spec: LayerSpec) -> None:
        self.spec = spec
        self.codec = spec.codec()
        self.row_bytes = self.codec.bytes_per_row(spec.dim)
        self.zero_row = self.codec.zero_rows(1, spec.dim)
        self.chunks: list[Chunk] = []
        self.starts: list[int] = []
        #: high-water mark: the largest end ever stored (what V.INFO reports)
        self.tokens = 0
        #: rows actually held (tokens minus gaps)
        self.rows = 0
        self.nbytes = 0
        #: journal sequence of the last write (durability of the rows)
        self.seq = 0

    # -- writing ---------------------------------------------------------------------------

    def store(
        self, start: int, count: int, data: bytes | memoryview, seq: int = 0, durable: memoryview | None = None,
    ) -> int:
        """Keep ``count`` encoded rows at ``start``; returns the change in bytes held."""
        before = self.nbytes
        end = start + count
        chunk = Chunk(start, count, data, durable=durable)
        if not self.chunks or start >= self.chunks[-1].end:
            self.chunks.append(chunk)
            self.starts.append(start)
        else:
            self._cut(start, end)
            pos = bisect_right(self.starts, start)
            self.chunks.insert(pos, chunk)
            self.starts.insert(pos, start)
        self.rows += count
        self.nbytes += len(data)
        self.tokens = max(self.tokens, end)
        self.seq = max(self.seq, seq)
        return self.nbytes - before

    def truncate(self, tokens: int) -> int:
        """Forget every row at or past ``tokens``; returns the change in bytes held."""
        before = self.nbytes
        if self.chunks and self.chunks[-1].end > tokens:
            self._cut(tokens, self.chunks[-1].end)
        self.tokens = self.chunks[-1].end if self.chunks else 0
        return self.nbytes - before

    def replace_chunks(self, chunks: list[Chunk]) -> int:
        """Put back a saved chunk list (V.RESTORE); returns the change in bytes held."""
        before = self.nbytes
        self.chunks = list(chunks)
        self.starts = [chunk.start for chunk in self.chunks]
        self.rows = sum(chunk.count for chunk in self.chunks)
        self.nbytes = sum(chunk.nbytes for chunk in self.chunks)
        self.tokens = self.chunks[-1].end if self.chunks else 0
        return self.nbytes - before

    def _cut(self, start: int, end: int) -> None:
        """Remove rows ``[start, end)``, keeping the parts of chunks outside it as slices."""
        first = max(bisect_right(self.starts, start) - 1, 0)
        last = first
        kept: list[Chunk] = []
        row = self.row_bytes
        for chunk in self.chunks[first:]:
            if chunk.start >= end:
                break
            last += 1
            if chunk.end <= start:
                kept.append(chunk)
                continue
            if chunk.start < start:
                kept.append(chunk.part(chunk.start, start, row))
            if chunk.end > end:
                kept.append(chunk.part(end, chunk.end, row))
        removed = self.chunks[first:last]
        self.rows += sum(c.count for c in kept) - sum(c.count for c in removed)
        self.nbytes += sum(c.nbytes for c in kept) - sum(c.nbytes for c in removed)
        self.chunks[first:last] = kept
        self.starts[first:last] = [c.start for c in kept]

    # -- reading ---------------------------------------------------------------------------

    def read(self, start: int, end: int) -> bytes | memoryview:
        """Encoded rows ``[start, end)``; rows never stored are the codec's zeros."""
        row = self.row_bytes
        pos = bisect_right(self.starts, start) - 1
        if pos >= 0:
            chunk = self.chunks[pos]
            if chunk.end >= end:
                if chunk.start == start and chunk.end == end:
                    return chunk.data
                return chunk.part(start, end, row).data
        out = bytearray(self.zero_row * (end - start)) if any(self.zero_row) else bytearray((end - start) * row)
        for chunk in self.chunks[max(pos, 0):]:
            if chunk.start >= end:
                break
            if chunk.end <= start:
                continue
            lo = max(chunk.start, start)
            hi = min(chunk.end, end)
            out[(lo - start) * row:(hi - start) * row] = chunk.part(lo, hi, row).data
        return out

    def covers(self, tokens: int) -> bool:
        """Are all rows ``[0, tokens)`` stored (no gap)?"""
        if self.tokens < tokens:
            return False
        if self.rows == self.tokens:
            return True
        expected = 0
        for chunk in self.chunks:
            if chunk.start > expected:
                return False
            expected = chunk.end
            if expected >= tokens:
                return True
        return expected >= tokens

    def chunk_list(self) -> list[Chunk]:
        return list(self.chunks)
