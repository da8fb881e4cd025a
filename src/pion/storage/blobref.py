"""``BlobRef``, the 24-byte name of a blob in an arena, and ``ArenaError``.

Why apart from ``arena``: the log records, the snapshot and the check tools carry refs without
touching the arena files; the value type and its packing are the part of the arena format they
share, and ``blobpack`` needs them without importing the store that maps the files.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

_REF = struct.Struct("<IQQI")


@dataclass(frozen=True, slots=True)
class BlobRef:
    """Where a blob lives: arena file id, byte offset, length, crc32c of the bytes."""

    arena_id: int
    offset: int
    length: int
    crc: int

    def pack(self) -> bytes:
        return _REF.pack(self.arena_id, self.offset, self.length, self.crc)

    @classmethod
    def unpack(cls, data: bytes | memoryview) -> BlobRef:
        return cls(*_REF.unpack(data))


class ArenaError(OSError):
    """A ref that points outside its arena, or an arena file that is missing."""
