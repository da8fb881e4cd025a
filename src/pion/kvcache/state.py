"""``STATE.*``: fixed-size per-request buffers, overwritten in place.

A buffer is allocated once with its size and mode: ``fixed`` refuses a write or read past its
end, ``ring`` wraps offsets and data around (a sliding-window tail). Buffers are not evicted;
their total is bounded by ``MAX_TOTAL`` and each by ``MAX_BUFFER``.
"""

from __future__ import annotations

from dataclasses import dataclass

from pion.protocol.errors import ReplyError

MAX_BUFFER = 256 * 1024 * 1024
MAX_TOTAL = 4 * 1024 * 1024 * 1024
MAX_READ = 4 * 1024 * 1024
NOT_FOUND = "ERR STATE: no such buffer (STATE.ALLOC first)"


@dataclass(slots=True)
class Buffer:
    data: bytearray
    mode: str
    writes: int = 0


class StateStore:
    def __init__(self) -> None:
        self.buffers: dict[bytes, Buffer] = {}
        self.nbytes = 0

    def alloc(self, sid: bytes, size: int, mode: str) -> None:
        if size <= 0 or size > MAX_BUFFER:
            raise ReplyError(f"ERR STATE.ALLOC: size must be 1..{MAX_BUFFER}")
        if sid in self.buffers:
            raise ReplyError("ERR STATE.ALLOC: state already allocated (FREE first)")
        if self.nbytes + size > MAX_TOTAL:
            raise ReplyError(f"ERR STATE.ALLOC: state budget exhausted ({MAX_TOTAL} bytes in all)")
        self.buffers[sid] = Buffer(bytearray(size), mode)
        self.nbytes += size

    def require(self, sid: bytes) -> Buffer:
        buffer = self.buffers.get(sid)
        if buffer is None:
            raise ReplyError(NOT_FOUND)
        return buffer

    def write(self, sid: bytes, offset: int, payload: bytes | memoryview) -> int:
        buffer = self.require(sid)
        size = len(buffer.data)
        if not payload:
            raise ReplyError("ERR STATE.WRITE: empty payload")
        if buffer.mode == "fixed":
            if offset + len(payload) > size:
                raise ReplyError(f"ERR STATE.WRITE: offset+length {offset + len(payload)} exceeds size {size}")
            buffer.data[offset:offset + len(payload)] = payload
        else:
            if len(payload) > size:
                raise ReplyError(f"ERR STATE.WRITE: payload of {len(payload)} bytes exceeds ring size {size}")
            start = offset % size
            first = min(len(payload), size - start)
            buffer.data[start:start + first] = payload[:first]
            buffer.data[:len(payload) - first] = payload[first:]
        buffer.writes += 1
        return len(payload)

    def read(self, sid: bytes, offset: int, length: int) -> bytes:
        buffer = self.require(sid)
        size = len(buffer.data)
        if length > MAX_READ:
            raise ReplyError(f"ERR STATE.READ: length must be <= {MAX_READ}")
        if buffer.mode == "fixed":
            if offset + length > size:
                raise ReplyError(f"ERR STATE.READ: offset+length {offset + length} exceeds size {size}")
            return bytes(buffer.data[offset:offset + length])
        if length > size:
            raise ReplyError(f"ERR STATE.READ: length {length} exceeds ring size {size}")
        start = offset % size
        first = min(length, size - start)
        return bytes(buffer.data[start:start + first]) + bytes(buffer.data[:length - first])

    def free(self, sid: bytes) -> bool:
        buffer = self.buffers.pop(sid, None)
        if buffer is None:
            return False
        self.nbytes -= len(buffer.data)
        return True
