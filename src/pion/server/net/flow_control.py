"""Flow control of one connection's reading, as a named state (uvicorn's ``FlowControl``, with
several reasons instead of one flag).

Reading a socket stops for three reasons, each set and cleared by one event:

- ``WRITES``: the transport's write buffer passed its high-water mark (``pause_writing``) until
  it drains (``resume_writing``): a client that does not read its replies stops being read;
- ``HELD``: a failed AUTH holds the connection's replies, and its reading, for a delay;
- ``READ_AHEAD``: a command runs in the worker pool and the next one is already parsed (its
  bytes are in); the kernel keeps the rest until the deferred command answered.

Reading is on exactly when no reason holds; the transport is told only on a transition, so
the reasons may be set and cleared in any order. Sans-IO apart from the two transport calls,
so ``tests/unit/test_flow_control.py`` drives it with a fake transport.
"""

from __future__ import annotations

from typing import Any

WRITES = "writes"
HELD = "held"
READ_AHEAD = "read_ahead"
REASONS = (WRITES, HELD, READ_AHEAD)


class FlowControl:
    """Why reading is paused now; pauses and resumes the transport on transitions only."""

    __slots__ = ("transport", "reasons")

    def __init__(self, transport: Any = None) -> None:
        self.transport = transport
        self.reasons: set[str] = set()

    @property
    def reading(self) -> bool:
        return not self.reasons

    def is_paused(self, reason: str) -> bool:
        return reason in self.reasons

    def pause(self, reason: str) -> None:
        """Stop reading for ``reason`` (idempotent)."""
        assert reason in REASONS, reason
        was_reading = not self.reasons
        self.reasons.add(reason)
        if was_reading and self._open():
            self.transport.pause_reading()

    def resume(self, reason: str) -> None:
        """``reason`` no longer holds; read again if no other one does (idempotent)."""
        if reason not in self.reasons:
            return
        self.reasons.discard(reason)
        if not self.reasons and self._open():
            self.transport.resume_reading()

    def _open(self) -> bool:
        transport = self.transport
        return transport is not None and not transport.is_closing()
