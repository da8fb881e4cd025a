"""The safetensors shards of one model directory: their tensors' names, dtypes, shapes and byte ranges.

Why our own header parser: the tier never converts a tensor, it only needs to know where each
one's bytes are, and it must refuse a malformed or hostile file with a clear message instead of
trusting it (every range is checked against the file's size, every shape against its byte
count). The files are opened once and mapped read-only; reads of cold experts use ``pread`` on
the same descriptors (one sequential read, readahead included), hits never touch them.

Format (safetensors): ``u64 LE header length``, a JSON object ``name -> {"dtype", "shape",
"data_offsets": [begin, end]}`` (plus ``__metadata__``), then the data; offsets are relative to
the end of the header.
"""

from __future__ import annotations

import json
import math
import mmap
import os
import struct
from dataclasses import dataclass
from pathlib import Path

#: safetensors dtype -> bytes per element
ITEMSIZE = {
    "F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U64": 8, "U32": 4,
    "U16": 2, "U8": 1, "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1, "F4": 1, "F6_E2M3": 1, "F6_E3M2": 1,
}
MAX_HEADER = 100 * 1024 * 1024
MAX_SHARDS = 4096


class ShardError(ValueError):
    """A directory or file that is not a readable set of safetensors shards (message says why)."""


@dataclass(frozen=True, slots=True)
class Tensor:
    name: str
    dtype: str
    shape: tuple[int, ...]
    shard: int
    #: absolute byte range in the shard file
    start: int
    end: int

    @property
    def nbytes(self) -> int:
        return self.end - self.start


class Shards:
    """The mapped shard files of a directory and an index of their tensors."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.paths: list[Path] = []
        self.fds: list[int] = []
        self.maps: list[mmap.mmap] = []
        self.tensors: dict[str, Tensor] = {}
        try:
            self._open()
        except BaseException:
            self.close()
            raise

    def _open(self) -> None:
        paths = sorted(p for p in self.directory.glob("*.safetensors") if p.is_file())
        if not paths:
            raise ShardError(f"{self.directory} holds no .safetensors files")
        if len(paths) > MAX_SHARDS:
            raise ShardError(f"{self.directory} holds {len(paths)} shards, more than {MAX_SHARDS}")
        for index, path in enumerate(paths):
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            self.fds.append(fd)
            self.paths.append(path)
            size = os.fstat(fd).st_size
            self.maps.append(mmap.mmap(fd, size, prot=mmap.PROT_READ) if size else mmap.mmap(-1, 1))
            for tensor in parse_header(self.maps[-1], size, index, path.name):
                if tensor.name in self.tensors:
                    raise ShardError(f"tensor {tensor.name} is in both {self.paths[self.tensors[tensor.name].shard].name} "
                                     f"and {path.name}")
                self.tensors[tensor.name] = tensor

    def view(self, shard: int, start: int, end: int) -> memoryview:
        """A read-only, zero-copy view of bytes ``[start, end)`` of a shard."""
        return memoryview(self.maps[shard])[start:end]

    def pread_into(self, shard: int, start: int, target: memoryview) -> None:
        """Fill ``target`` from the shard at ``start`` (a short read is an error: the file shrank)."""
        fd, done = self.fds[shard], 0
        while done < target.nbytes:
            got = os.preadv(fd, [target[done:]], start + done)
            if got <= 0:
                raise ShardError(f"{self.paths[shard].name}: short read at {start + done} (was the file truncated?)")
            done += got

    def copy_into(self, shard: int, start: int, length: int, fd: int, offset: int) -> None:
        """Copy a range of a shard into file ``fd`` at ``offset`` in the kernel (``sendfile``;
        ``pread`` + ``pwrite`` where the kernel refuses)."""
        os.lseek(fd, offset, os.SEEK_SET)
        done = 0
        try:
            while done < length:
                sent = os.sendfile(fd, self.fds[shard], start + done, length - done)
                if sent <= 0:
                    raise ShardError(f"{self.paths[shard].name}: short read at {start + done} (was the file truncated?)")
                done += sent
        except OSError as exc:
            if done or exc.errno not in (22, 38, 95):  # EINVAL, ENOSYS, EOPNOTSUPP: no sendfile here
                raise
            buffer = memoryview(bytearray(length))
            self.pread_into(shard, start, buffer)
            while buffer:
                written = os.pwrite(fd, buffer, offset)
                buffer, offset = buffer[written:], offset + written


    def advise_willneed(self, shard: int, start: int, length: int) -> None:
        """Ask the kernel to read a range into the page cache ahead of use (a cheap prefetch)."""
        if hasattr(os, "posix_fadvise"):
            os.posix_fadvise(self.fds[shard], start, length, os.POSIX_FADV_WILLNEED)

    def close(self) -> None:
        """Close the descriptors; the maps go when no reply still views them (their last reference)."""
        for fd in self.fds:
            os.close(fd)
        self.fds = []
        self.maps = []


def parse_header(data: mmap.mmap, size: int, shard: int, name: str) -> list[Tensor]:
    """The tensors a safetensors file declares, each range and shape checked against the file."""
    if size < 8:
        raise ShardError(f"{name}: {size} bytes is too short for a safetensors file")
    (length,) = struct.unpack_from("<Q", data, 0)
    if length > MAX_HEADER or 8 + length > size:
        raise ShardError(f"{name}: header length {length} does not fit the file ({size} bytes)")
    try:
        header = json.loads(bytes(data[8:8 + length]))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ShardError(f"{name}: header is not JSON ({exc})") from None
    if not isinstance(header, dict):
        raise ShardError(f"{name}: header is not a JSON object")
    base, out = 8 + length, []
    for key, entry in header.items():
        if key == "__metadata__":
            continue
        out.append(_tensor(key, entry, base, size, shard, name))
    return out


def _tensor(key: str, entry: object, base: int, size: int, shard: int, name: str) -> Tensor:
    if not isinstance(entry, dict):
        raise ShardError(f"{name}: tensor {key} is not described by an object")
    dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
    if dtype not in ITEMSIZE:
        raise ShardError(f"{name}: tensor {key} has unknown dtype {dtype!r}")
    if not (isinstance(shape, list) and all(isinstance(d, int) and d >= 0 for d in shape)):
        raise ShardError(f"{name}: tensor {key} has a bad shape {shape!r}")
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(isinstance(o, int) for o in offsets)):
        raise ShardError(f"{name}: tensor {key} has bad data_offsets {offsets!r}")
    begin, end = offsets
    if not 0 <= begin <= end or base + end > size:
        raise ShardError(f"{name}: tensor {key} bytes {begin}..{end} lie outside the file")
    count = math.prod(shape)
    if dtype in ("F4", "F6_E2M3", "F6_E3M2"):
        expected = None  # sub-byte packing: the byte count is whatever the writer packed
    else:
        expected = count * ITEMSIZE[dtype]
    if expected is not None and expected != end - begin:
        raise ShardError(f"{name}: tensor {key} is {dtype} {shape} ({expected} bytes) but spans {end - begin} bytes")
    return Tensor(key, dtype, tuple(shape), shard, base + begin, base + end)
