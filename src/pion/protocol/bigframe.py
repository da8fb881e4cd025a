"""One multibulk request frame with large arguments, received straight into their own buffers.

Why: hiredis copies every byte it is fed into its own buffer, again into the argument's
``bytes``, and the reader had to join what it had fed to check the headers of a frame still
arriving. For a multi-megabyte argument (a ``V.STOREBATCH`` of K/V rows) those copies cost more
than the command. When the reader sees such a frame it takes the frame's bytes back from hiredis
and hands them here: each argument of ``BIG_ARG`` bytes or more gets a buffer of its exact size
(allocated when its ``$len`` header arrives, checked against the limits first, so an oversize
length is refused before its payload is buffered) and every byte is copied once, from the
socket's chunk into that buffer. ``recv_target`` exposes the rest of that buffer so a caller
with its own socket can receive into it directly.

A large argument comes out as a read-only ``memoryview`` of its buffer for commands in
``zero_copy`` (their handlers take memoryviews, as on log replay), else as ``bytes``.
"""

from __future__ import annotations

import numpy as np

from pion.protocol.errors import ProtocolError

#: an argument at least this large is received into its own buffer
BIG_ARG = 128 * 1024
#: receive straight into an argument's buffer only while at least this much of it is missing
DIRECT_MIN = 64 * 1024
#: the longest ``*N`` / ``$len`` line accepted (Redis's PROTO_INLINE_MAX_SIZE)
MAX_HEADER = 64 * 1024


class BigFrame:
    """An incremental parser for one multibulk frame; ``feed`` until ``done``, then ``argv()``."""

    __slots__ = ("argc", "args", "head", "payload", "fill", "skip", "held", "max_args", "max_bulk", "done")

    def __init__(self, max_args: int, max_bulk: int) -> None:
        #: the frame's ``*N`` (-1 until its line arrived)
        self.argc = -1
        self.args: list = []
        #: a header line in progress
        self.head = bytearray()
        #: the argument being received (bytearray, or a numpy buffer's memoryview) and its fill level
        self.payload: memoryview | None = None
        self.fill = 0
        #: bytes of a bulk's trailing CRLF still to skip
        self.skip = 0
        #: bytes held for this frame (for the query-buffer limit)
        self.held = 0
        self.max_args = max_args
        self.max_bulk = max_bulk
        self.done = False

    def feed(self, data: bytes | memoryview, start: int = 0) -> int:
        """Consume this frame's bytes from ``data[start:]``; returns the offset just past them
        (the rest follows the frame)."""
        src = data if data.__class__ is bytes else bytes(data)
        view = memoryview(src)
        pos, end = start, len(view)
        while pos < end and not self.done:
            if self.skip:
                taken = min(self.skip, end - pos)
                self.skip -= taken
                pos += taken
                self._maybe_done()
            elif self.payload is not None:
                taken = min(len(self.payload) - self.fill, end - pos)
                self.payload[self.fill:self.fill + taken] = view[pos:pos + taken]
                self.fill += taken
                self.held += taken
                pos += taken
                if self.fill == len(self.payload):
                    self._arg_complete()
            else:
                pos = self._header(src, view, pos, end)
        return pos

    def recv_target(self) -> memoryview | None:
        """The unfilled rest of the large argument being received, or None when there is none
        or only a little is left (then one ordinary read takes it and what follows)."""
        if self.payload is None or self.skip or len(self.payload) - self.fill < DIRECT_MIN:
            return None
        return self.payload[self.fill:]

    def received(self, count: int) -> None:
        """``count`` bytes were written into ``recv_target()``."""
        self.fill += count
        self.held += count
        if self.fill == len(self.payload):  # type: ignore[arg-type]
            self._arg_complete()

    def argv(self, zero_copy: frozenset[bytes] | set[bytes]) -> list:
        """The arguments: large ones as read-only views for ``zero_copy`` commands, else bytes."""
        args = self.args
        keep_views = bool(args) and args[0].lower() in zero_copy
        return [a if a.__class__ is bytes else (a.toreadonly() if keep_views else a.tobytes()) for a in args]

    # -- internals -------------------------------------------------------------------------

    def _header(self, src: bytes, view: memoryview, pos: int, end: int) -> int:
        """Read (part of) a ``*N`` or ``$len`` line (``src`` is ``view``'s bytes); start the
        argument it announces."""
        head = self.head
        stop = src.find(b"\n", pos, min(end, pos + MAX_HEADER + 2))
        if stop < 0:
            head += view[pos:end]
            if len(head) > MAX_HEADER:
                raise ProtocolError("too big mbulk count string" if self.argc < 0 else "too big bulk count string")
            return end
        head += view[pos:stop]
        line = bytes(head[:-1] if head[-1:] == b"\r" else head)
        head.clear()
        if self.argc < 0:
            self._start(line)
        else:
            self._bulk_header(line)
        return stop + 1

    def _start(self, line: bytes) -> None:
        count = _number(line[1:]) if line[:1] == b"*" else None
        if count is None or count > self.max_args:
            raise ProtocolError("invalid multibulk length")
        self.argc = max(count, 0)
        self._maybe_done()

    def _bulk_header(self, line: bytes) -> None:
        if line[:1] != b"$":
            raise ProtocolError(f"expected '$', got '{chr(line[0]) if line else ' '}'")
        size = _number(line[1:])
        if size is None or size < 0 or size > self.max_bulk:
            raise ProtocolError("invalid bulk length")
        if size >= BIG_ARG:
            self.payload = memoryview(np.empty(size, dtype=np.uint8)).cast("B")
        else:
            self.payload = memoryview(bytearray(size))
        self.fill = 0
        if size == 0:
            self._arg_complete()

    def _arg_complete(self) -> None:
        payload = self.payload
        self.args.append(payload if len(payload) >= BIG_ARG else payload.tobytes())  # type: ignore[arg-type]
        self.payload = None
        self.skip = 2
        self._maybe_done()

    def _maybe_done(self) -> None:
        if not self.skip and self.payload is None and len(self.args) == self.argc:
            self.done = True


def _number(text: bytes) -> int | None:
    if not text or len(text) > 20 or not (text.isdigit() or (text[:1] == b"-" and text[1:].isdigit())):
        return None
    return int(text)
