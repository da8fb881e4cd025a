"""Weights mapped from their files: one worker hashes them, the next reuses the digest, provably.

Why: the fingerprint hashes every weight (``pion.client.fingerprint``), hundreds of ms for a
1B model; every worker of the same model paid it again. A digest may be reused only when it is
provably for the same bytes, and nothing cheap proves that of an ordinary in-memory copy (an
edit through ``tensor.data`` or numpy leaves no trace in torch's version counters). A tensor
whose bytes lie in a *private mapping of its weights file* is different: the kernel says, per
page (``/proc/self/pagemap``), whether it still holds the file's bytes or was written to (a
copy-on-write page is anonymous, a swapped one is marked so). So for such a tensor the bytes
are the file's at a known offset, and the file is the same as when another worker hashed it
when its identity is unchanged: device, inode, size, ``mtime_ns`` and ``ctime_ns`` (which no
write, truncation or ``utime`` leaves as it was) and a sampled content checksum.

Where the kernel has userfaultfd's asynchronous write-protect (Linux 6.7) the loader maps the
files itself (``map_file``) and arms it (``track_writes``) before any tensor points at the
mapping: from then on the kernel clears a page's write-protect bit on its first write, so
"no page written since the mapping was made" is a page-table walk (``PAGEMAP_SCAN`` for a
written page, ~0.3 ms for 540 MB) instead of a look at every page's ``struct page`` (~5-20 ms,
the cache misses of 132,000 of them). Elsewhere the per-page anonymous test below runs.

``plan`` describes a model's tensors as ``("file", path, offset)`` where that proof holds and by
a hash of their own bytes otherwise (small buffers, edited weights); ``lookup`` returns the
digest a worker recorded for exactly that description and those unchanged files; ``record``
stores a freshly hashed digest, only if the proof still holds after the hash. Anything else
(no ``/proc``, a shared mapping, a tensor spanning two mappings, a file replaced or touched) is
no reuse: the full hash runs, which re-checks everything. The record lives in
``fingerprints.json`` in the user's cache dir (``pion.client.worker_state.cache_dir``).
"""

from __future__ import annotations

import array
import bisect
import ctypes
import hashlib
import json
import mmap
import os
import struct
import weakref
import zlib
from dataclasses import dataclass, field

from pion.client import worker_state

FILE_NAME = "fingerprints.json"
SAMPLES = 16
SAMPLE_BYTES = 16 * 1024
PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def _iowr(number: int, size: int) -> int:
    """Linux's ``_IOWR('f', number, size)`` (the procfs ioctls' magic is ``'f'``)."""
    return (3 << 30) | (size << 16) | (ord("f") << 8) | number


#: ``PROCMAP_QUERY`` (Linux 6.11): the mapping covering one address, asked of ``/proc/self/maps``
_PROCMAP_QUERY = struct.Struct("<9Q4I2Q")
PROCMAP_QUERY = _iowr(17, _PROCMAP_QUERY.size)
_VMA_SHARED = 0x08
#: ``PAGEMAP_SCAN`` (Linux 6.7): the kernel finds the pages of given categories in a range
_PM_SCAN = struct.Struct("<12Q")
PAGEMAP_SCAN = _iowr(16, _PM_SCAN.size)
_WP_ALLOWED, _IS_WRITTEN, _IS_FILE, _IS_PRESENT, _IS_SWAPPED = 1 << 0, 1 << 1, 1 << 2, 1 << 3, 1 << 4
#: which of the ioctls this kernel answers (None: not tried yet)
_HAVE: dict[str, bool] = {}
#: userfaultfd: ``UFFD_USER_MODE_ONLY`` (allowed unprivileged), the API, register and write-protect
_UFFD_USER_MODE_ONLY, _UFFD_API_VERSION, _UFFD_FEATURE_WP_ASYNC = 1, 0xAA, 1 << 15
_UFFDIO_API = (3 << 30) | (24 << 16) | (0xAA << 8) | 0x3F
_UFFDIO_REGISTER = (3 << 30) | (32 << 16) | (0xAA << 8) | 0x00
_UFFDIO_WRITEPROTECT = (3 << 30) | (24 << 16) | (0xAA << 8) | 0x06
_SYS_USERFAULTFD = {"x86_64": 323, "aarch64": 282}
#: the process's one userfaultfd (never closed: a registration ends with its mapping)
_UFFD: list[int] = []
#: mappings armed by ``track_writes``: start -> (end, a weak reference to what owns the mapping,
#: ``(inode, path)`` of the file it maps from its first byte, when the owner is ``map_file``'s)
_TRACKED: dict[int, tuple[int, weakref.ref, tuple[int, str] | None]] = {}


def _after_fork_in_child() -> None:
    """A forked child's mappings are not registered (no ``UFFD_FEATURE_EVENT_FORK``), and the
    inherited userfaultfd acts on the *parent's* address space: forget both (a close here drops
    only the child's reference; the parent's stays)."""
    for fd in _UFFD:
        try:
            os.close(fd)
        except OSError:
            pass
    _UFFD.clear()
    _TRACKED.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


@dataclass
class Plan:
    """A model's tensors as file ranges and own-byte hashes, and the files' identities."""

    key: str
    files: dict[str, dict]
    ranges: list[tuple[int, int]] = field(default_factory=list)


def _query_mappings(addresses: list[int]) -> list[tuple[int, int, int, int, str]] | None:
    """``(start, end, file offset, inode, path)`` of the private file mappings holding these
    addresses, asked per mapping with ``PROCMAP_QUERY`` (one ioctl per mapping met, in address
    order: ~0.1 ms where parsing ``/proc/self/maps`` of a process with torch loaded costs ~2 ms);
    None when the kernel has no such ioctl."""
    import errno
    import fcntl

    if _HAVE.get("query") is False:
        return None
    name = ctypes.create_string_buffer(4096)
    out, end = [], 0
    fd = os.open("/proc/self/maps", os.O_RDONLY)
    try:
        for address in sorted(addresses):
            if address < end:
                continue  # inside the mapping found last
            arg = bytearray(_PROCMAP_QUERY.pack(_PROCMAP_QUERY.size, 0, address, 0, 0, 0, 0, 0, 0, 0, 0,
                                                len(name), 0, ctypes.addressof(name), 0))
            try:
                fcntl.ioctl(fd, PROCMAP_QUERY, arg, True)
            except OSError as exc:
                if exc.errno == errno.ENOENT:
                    continue  # no mapping there (cannot be a file's)
                if not _HAVE.get("query"):
                    _HAVE["query"] = False  # ENOTTY/EINVAL: an older kernel
                    return None
                raise
            _HAVE["query"] = True
            fields = _PROCMAP_QUERY.unpack(arg)
            start, end, flags, offset, inode, name_size = fields[3], fields[4], fields[5], fields[7], fields[8], fields[11]
            path = name.raw[:max(0, name_size - 1)].decode("utf-8", "surrogateescape")
            if inode and not flags & _VMA_SHARED and path.startswith("/"):
                out.append((start, end, offset, inode, path))
    finally:
        os.close(fd)
    return out


def _mappings(low: int, high: int) -> list[tuple[int, int, int, int, str]]:
    """``(start, end, file offset, inode, path)`` of this process's private file mappings that
    overlap ``[low, high)``, parsed from ``/proc/self/maps`` (the fallback of
    ``_query_mappings``; only those lines are parsed in full: a process has thousands)."""
    out = []
    with open("/proc/self/maps") as fh:
        for line in fh:
            dash = line.index("-")
            space = line.index(" ", dash)
            start, end = int(line[:dash], 16), int(line[dash + 1:space], 16)
            if end <= low or start >= high:
                continue
            parts = line.split(maxsplit=5)
            if len(parts) < 6 or not parts[5].startswith("/") or parts[1][3] != "p" or parts[4] == "0":
                continue
            out.append((start, end, int(parts[2], 16), int(parts[4]), parts[5].rstrip("\n")))
    return out


class _FileMapping(mmap.mmap):
    """``map_file``'s mapping, knowing what ``/proc/self/maps`` would say of it: ``source`` is
    ``(inode, path)`` of the mapped file (the kernel's own name for it), so the proof finds the
    files of tensors in armed mappings without asking the kernel (``plan``)."""

    source: tuple[int, str] | None = None


def map_file(path: str):
    """A private, writable mapping of the whole file (an ``mmap.mmap``: a tensor made over it with
    ``torch.frombuffer`` keeps it alive); pass it to ``track_writes`` before exposing it."""
    with open(path, "rb") as fh:
        mapping = _FileMapping(fh.fileno(), 0, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_WRITE)
        try:  # the name the kernel gives the open file (what PROCMAP_QUERY would answer)
            name = os.readlink(f"/proc/self/fd/{fh.fileno()}")
        except OSError:
            name = None
        if name and name.startswith("/"):
            mapping.source = (os.fstat(fh.fileno()).st_ino, name)
    return mapping


def _uffd() -> int | None:
    """The process's userfaultfd with asynchronous write-protect, or None where there is none."""
    import fcntl

    if _UFFD:
        return _UFFD[0]
    if _HAVE.get("uffd") is False:
        return None
    number = _SYS_USERFAULTFD.get(os.uname().machine)
    fd = -1
    try:
        if number is None:
            raise OSError("no userfaultfd number for this machine")
        fd = ctypes.CDLL(None, use_errno=True).syscall(number, os.O_CLOEXEC | os.O_NONBLOCK | _UFFD_USER_MODE_ONLY)
        if fd < 0:
            raise OSError(ctypes.get_errno(), "userfaultfd")
        api = bytearray(struct.pack("<3Q", _UFFD_API_VERSION, _UFFD_FEATURE_WP_ASYNC, 0))
        fcntl.ioctl(fd, _UFFDIO_API, api, True)
    except (OSError, AttributeError):
        if fd >= 0:
            os.close(fd)
        _HAVE["uffd"] = False
        return None
    _HAVE["uffd"] = True
    _UFFD.append(fd)
    return fd


def track_writes(address: int, size: int, owner) -> bool:
    """Arm the kernel's write tracking over a fresh private mapping ``[address, address + size)``
    that nothing has written yet (``map_file``'s, before any tensor points at it); ``owner`` is
    what keeps the mapping alive (the ``mmap``). False where the kernel has no asynchronous
    write-protect: then the per-page anonymous test proves the pages instead."""
    import fcntl

    fd = _uffd()
    if fd is None or size <= 0 or address % PAGE:
        return False
    length = (size + PAGE - 1) // PAGE * PAGE
    try:
        fcntl.ioctl(fd, _UFFDIO_REGISTER, bytearray(struct.pack("<4Q", address, length, 1 << 1, 0)), True)
        fcntl.ioctl(fd, _UFFDIO_WRITEPROTECT, bytearray(struct.pack("<3Q", address, length, 1)), True)
    except OSError:
        return False
    def gone(ref: weakref.ref) -> None:  # the mapping is unmapped with its owner
        if _TRACKED.get(address, (0, None, None))[1] is ref:
            del _TRACKED[address]

    _TRACKED[address] = (address + length, weakref.ref(owner, gone), getattr(owner, "source", None))
    return True


def _scan_written(ranges: list[tuple[int, int]]) -> bool:
    """True when every range lies in a mapping ``track_writes`` armed and the kernel finds no page
    in it written since (nor one outside a write-protected mapping); False means "not proven
    this way" (the caller then asks the per-page test)."""
    import fcntl

    if not _TRACKED or not _HAVE.get("scan", True):
        return False
    starts = sorted(_TRACKED)
    spans = _spans(ranges)
    for first, last in spans:  # each merged span inside one armed mapping that still stands
        at = bisect.bisect_right(starts, first * PAGE) - 1
        if at < 0 or (last + 1) * PAGE > _TRACKED[starts[at]][0] or _TRACKED[starts[at]][1]() is None:
            return False
    region = ctypes.create_string_buffer(24)
    fd = os.open("/proc/self/pagemap", os.O_RDONLY)
    try:
        for first, last in spans:
            start, end = first * PAGE, (last + 1) * PAGE
            # a page matches when its mapping is not write-protect tracked, or it was written
            arg = bytearray(_PM_SCAN.pack(_PM_SCAN.size, 0, start, end, 0, ctypes.addressof(region), 1, 0,
                                          _WP_ALLOWED, 0, _WP_ALLOWED | _IS_WRITTEN, _WP_ALLOWED | _IS_WRITTEN))
            try:
                found = fcntl.ioctl(fd, PAGEMAP_SCAN, arg, True)
            except OSError:
                return False
            if found or _PM_SCAN.unpack(arg)[4] != end:
                return False
    finally:
        os.close(fd)
    return True


def _spans(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The ``(first page, last page)`` spans covering these ranges, neighbours merged (one read each)."""
    spans: list[list[int]] = []
    for ptr, nbytes in sorted(ranges):
        first, last = ptr // PAGE, (ptr + nbytes - 1) // PAGE
        if spans and first <= spans[-1][1] + 1:
            spans[-1][1] = max(spans[-1][1], last)
        else:
            spans.append([first, last])
    return [(a, b) for a, b in spans]


def untouched(ranges: list[tuple[int, int]]) -> bool:
    """Does every page of these ``(address, nbytes)`` ranges still hold its file's bytes?
    (Not present: read from the file on first touch; present and file-backed: the page cache's;
    anonymous or swapped: written to since it was mapped.)

    Asked with ``PAGEMAP_SCAN`` where the kernel has it: it looks for a present non-file page or
    a swapped one in each span and copies nothing out (the pagemap read below copies 8 bytes a
    page and tests them in numpy: 1 MB for a 540 MB model). First, where the pages lie in
    mappings ``track_writes`` armed, the kernel's write tracking answers (``_scan_written``)."""
    if _scan_written(ranges):
        return True
    scanned = _scan_untouched(ranges)
    return _read_untouched(ranges) if scanned is None else scanned


def _scan_untouched(ranges: list[tuple[int, int]]) -> bool | None:
    """``untouched`` by ``PAGEMAP_SCAN``; None when the kernel has no such ioctl."""
    import fcntl

    if _HAVE.get("scan") is False:
        return None
    region = ctypes.create_string_buffer(24)  # one page_region: finding one is enough
    fd = os.open("/proc/self/pagemap", os.O_RDONLY)
    try:
        for first, last in _spans(ranges):
            start, end = first * PAGE, (last + 1) * PAGE
            # a page matches when it is not a file page (inverted, required) and is present or swapped
            arg = bytearray(_PM_SCAN.pack(_PM_SCAN.size, 0, start, end, 0, ctypes.addressof(region), 1, 0,
                                          _IS_FILE, _IS_FILE, _IS_PRESENT | _IS_SWAPPED,
                                          _IS_FILE | _IS_PRESENT | _IS_SWAPPED))
            try:
                found = fcntl.ioctl(fd, PAGEMAP_SCAN, arg, True)
            except OSError:
                if not _HAVE.get("scan"):
                    _HAVE["scan"] = False  # ENOTTY/EINVAL: an older kernel
                    return None
                raise
            _HAVE["scan"] = True
            if found or _PM_SCAN.unpack(arg)[4] != end:  # a written page, or the walk stopped short
                return False
    finally:
        os.close(fd)
    return True


def _read_untouched(ranges: list[tuple[int, int]]) -> bool:
    """``untouched`` by reading ``/proc/self/pagemap`` (every kernel since 2.6.25)."""
    import numpy as np

    with open("/proc/self/pagemap", "rb") as fh:
        for first, last in _spans(ranges):
            fh.seek(first * 8)
            entries = np.frombuffer(fh.read((last - first + 1) * 8), np.uint64)
            present, swapped, file_page = (entries >> 63) & 1, (entries >> 62) & 1, (entries >> 61) & 1
            if len(entries) != last - first + 1 or swapped.any() or (present & (1 - file_page)).any():
                return False
    return True


def file_identity(path: str) -> dict:
    """What says a file is the one another worker hashed: its stat and a sampled content checksum.

    The stat is the file's own (``fstat`` of the descriptor the samples are read through); the
    samples (``SAMPLES`` x ``SAMPLE_BYTES``, ``os.pread``, spread from the first byte to the last)
    go through zlib's CRC-32, which reads at memory speed and needs no import: a change detector
    next to ``ctime_ns``, which every write changes and only root can put back."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        step, crc = max(0, st.st_size - SAMPLE_BYTES), 0
        for i in range(SAMPLES):
            crc = zlib.crc32(os.pread(fd, SAMPLE_BYTES, step * i // (SAMPLES - 1)), crc)
    finally:
        os.close(fd)
    return {"dev": st.st_dev, "ino": st.st_ino, "size": st.st_size, "mtime_ns": st.st_mtime_ns,
            "ctime_ns": st.st_ctime_ns, "sample_crc32": crc}


#: a tensor in no armed mapping and larger than this makes the proof ask the kernel for every
#: file mapping (smaller ones are described by their own bytes, cheaper than the question)
OWN_BYTES = 1 << 20


def _armed_mappings() -> list[tuple[int, int, int, int, str]]:
    """``(start, end, file offset, inode, path)`` of the live mappings ``track_writes`` armed over
    ``map_file``'s mappings, from what was recorded when they were made: no system call. Sound
    because the proof then asks the kernel whether every page of those ranges lies in a
    write-protect armed mapping and was never written (``_scan_written``): a range unmapped and
    mapped again since is not armed, so it is no proof."""
    return [(start, end, 0, *source) for start, (end, ref, source) in _TRACKED.items()
            if source is not None and ref() is not None]


def plan(items: list[tuple[str, object, tuple, int, int]], own_hash, extra: object) -> Plan | None:
    """The description of ``(name, dtype, shape, address, nbytes)`` items (contiguous tensors; an
    address of 0 for one that cannot lie in a file), or None when no tensor lies in a weights
    file (nothing to reuse) or the proof is unavailable. ``own_hash(index)`` hashes an item's
    own bytes (for those not in a file; asked only once some item is in one).

    The files holding the tensors are found in the mappings ``map_file`` made and
    ``track_writes`` armed, when every tensor of more than ``OWN_BYTES`` lies in one (the rest
    are described by their own bytes); otherwise the kernel names each mapping (``PROCMAP_QUERY``,
    else ``/proc/self/maps``). Then ``_describe``; None where a file or page proves nothing."""
    armed = _armed_mappings() if _HAVE.get("scan", True) else []
    found = _describe(items, armed, OWN_BYTES) if armed else None
    if isinstance(found, tuple):
        try:  # the record is trusted only with the write tracking's proof (_armed_mappings)
            proven = _scan_written(found[4])
        except OSError:
            proven = False
        if not proven:
            found = None  # then the kernel names the mappings and any page test may prove them
    else:
        proven = False
    if found is None:
        addresses = [ptr for _, _, _, ptr, nbytes in items if nbytes]
        if not addresses:
            return None
        try:
            maps = _query_mappings(addresses)
            if maps is None:
                maps = _mappings(min(addresses), max(ptr + nbytes for _, _, _, ptr, nbytes in items if nbytes))
        except (OSError, ValueError):
            return None
        found = _describe(items, maps, None)
    if not isinstance(found, tuple):
        return None
    parts, numbers, own, files, ranges = found
    try:
        if not (proven or untouched(ranges)):
            return None
    except OSError:
        return None
    text = [*parts, [own_hash(index) for index in own], extra]
    key = hashlib.sha256(json.dumps(text, default=str, separators=(",", ":")).encode())  # ASCII
    key.update(numbers.tobytes())
    return Plan(key.hexdigest(), files, ranges)


def _describe(items, maps: list, own_limit: int | None):
    """One pass over the items against these mappings: ``(text parts, numbers, own items, file
    identities, page ranges)``; False where a file proves nothing (replaced since it was mapped,
    unreadable), None where no item lies in a file or (``own_limit``) a larger one lies in none.

    Each file is named once (its index in the description), stat'ed and sampled once, at the
    first tensor met in it; the pages to prove are, per mapping, one span from its lowest tensor
    to the end of its highest (pages between them included: a written one there is a miss, never
    a wrong reuse), so the kernel is asked once per mapping, not once per tensor. The key is a
    SHA-256 over the text parts as JSON (self-delimiting) and then the numbers packed as int64,
    per item ``ndim, *shape, file, offset, nbytes`` (file -1: its own bytes, hashed in the JSON):
    every description has one encoding, and JSON-encoding the ~2,000 numbers of a 273-tensor
    model cost the next worker more than the rest of this pass."""
    maps = sorted(maps)
    starts = [m[0] for m in maps]
    kinds = {dtype: str(dtype) for dtype in {item[1] for item in items}}  # str() once per dtype
    names = [item[0] for item in items]
    dtypes = [kinds[item[1]] for item in items]
    numbers = array.array("q")
    own: list[int] = []  # the items described by their own bytes
    files: dict[str, dict] = {}
    paths: dict[str, int] = {}  # path -> its index in the description (first met, in item order)
    spans: dict[int, list[int]] = {}  # mapping start -> [lowest address, highest end] of its tensors
    low = high = 0  # the mapping of the previous item (most share one: no bisect then)
    for index, (_, _, shape, ptr, nbytes) in enumerate(items):
        numbers.append(len(shape))
        numbers.extend(shape)
        if not (low <= ptr and ptr + nbytes <= high):
            at = bisect.bisect_right(starts, ptr) - 1  # the mapping starting at or below ptr
            if not nbytes or at < 0 or ptr + nbytes > maps[at][1]:
                if own_limit is not None and nbytes > own_limit:
                    return None
                own.append(index)
                numbers.extend((-1, 0, 0))
                continue
            low, high, offset, inode, path = maps[at]
            number = paths.get(path)
            if number is None:
                try:
                    identity = file_identity(path)
                except OSError:
                    return False
                if identity["ino"] != inode:  # the path now names another file than the one mapped
                    return False
                number = paths[path] = len(paths)
                files[path] = identity
            span = spans.get(low)
            if span is None:
                span = spans[low] = [ptr, ptr + nbytes]
        elif not nbytes:
            own.append(index)
            numbers.extend((-1, 0, 0))
            continue
        span[0], span[1] = min(span[0], ptr), max(span[1], ptr + nbytes)
        numbers.extend((number, offset + ptr - low, nbytes))
    if not spans:
        return None
    ranges = [(first, end - first) for first, end in spans.values()]
    return [list(paths), names, dtypes], numbers, own, files, ranges


def _path():
    return worker_state.cache_dir() / FILE_NAME


def lookup(found: Plan) -> str | None:
    """The digest recorded for exactly this plan and these unchanged files, else None."""
    try:
        entry = json.loads(_path().read_bytes()).get(found.key)
    except (OSError, ValueError, AttributeError):
        return None
    if not isinstance(entry, dict) or entry.get("files") != found.files:
        return None
    value = entry.get("digest")
    return value if isinstance(value, str) else None


def record(found: Plan, value: str) -> bool:
    """Store ``value`` for ``found`` if the files and their mapped pages are still as planned."""
    try:
        if not untouched(found.ranges) or {p: file_identity(p) for p in found.files} != found.files:
            return False
        return worker_state.update(FILE_NAME, lambda data: data.__setitem__(found.key, {"files": found.files,
                                                                                     "digest": value}))
    except OSError:
        return False
