"""CLIENT PAUSE: while a pause is in effect, the commands it covers wait, then run in order.

Redis postpones a paused command at the point where it would run: the client is parked as
blocked (``blocked_clients`` counts it), its connection reads nothing more, and when the pause
ends (timeout or CLIENT UNPAUSE) every parked command runs in the order it arrived. A ``WRITE``
pause covers commands flagged ``write`` or ``may_replicate`` and an EXEC whose queue holds one;
an ``ALL`` pause covers every command, CLIENT UNPAUSE included, as in Redis 7.

Must not import the command families; the dispatcher calls ``holds``/``postpone``.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

from pion.server.blocking import NOT_READY, BlockRequest

if TYPE_CHECKING:
    from pion.server.app import Server
    from pion.server.net.client import Client
    from pion.server.registry import CommandSpec

_WRITE_FLAGS = frozenset({"write", "may_replicate"})


class ClientPause:
    def __init__(self, server: Server) -> None:
        self.server = server
        self.mode: str | None = None  # "write" | "all" while paused
        self.end = 0.0
        #: client id -> (client, argv) parked until the pause ends, in arrival order
        self.postponed: OrderedDict[int, tuple[Client, list[bytes]]] = OrderedDict()
        self._timer: asyncio.TimerHandle | None = None

    @property
    def active(self) -> bool:
        return self.mode is not None

    def pause(self, seconds: float, mode: str) -> None:
        """Start or change a pause: the mode is replaced, the end is the later of both (Redis)."""
        end = time.time() + seconds
        self.mode = mode
        self.end = max(self.end, end) if self.server.paused_until else end
        self.server.paused_until = self.end
        if self._timer is not None:
            self._timer.cancel()
        loop = asyncio.get_running_loop()
        self._timer = loop.call_later(max(self.end - time.time(), 0.0), self._expire)

    def unpause(self) -> None:
        """End the pause now and run what it held."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.mode = None
        self.end = 0.0
        self.server.paused_until = 0.0
        self._release()

    def remaining_ms(self) -> int:
        return max(int((self.end - time.time()) * 1000), 0) if self.active else 0

    def holds(self, client: Client, spec: CommandSpec, argv: list[bytes]) -> bool:
        """Whether this command must wait for the pause to end."""
        if self.mode is None or client.conn is None or spec.name == "quit":
            return False
        if self.mode == "all":
            return True
        if spec.flags & _WRITE_FLAGS:
            return True
        if spec.name == "exec" and client.multi:
            return any(queued.flags & _WRITE_FLAGS for queued, _ in client.multi)
        return False

    def postpone(self, client: Client, argv: list[bytes]) -> Any:
        """Park the client as blocked (no keys, no timeout) until the pause ends."""
        from pion.server.dispatch import BLOCKED

        request = BlockRequest([], 0, _never_ready, argv=argv)
        self.server.blocking.block(client, request)
        self.postponed[client.id] = (client, argv)
        return BLOCKED

    def is_postponed(self, client: Client) -> bool:
        return client.id in self.postponed

    def _expire(self) -> None:
        self._timer = None
        if self.mode is not None and time.time() >= self.end - 0.001:
            self.unpause()
        elif self.mode is not None:
            loop = asyncio.get_running_loop()
            self._timer = loop.call_later(max(self.end - time.time(), 0.0), self._expire)

    def _release(self) -> None:
        """Run the parked commands in order; one may block again or be paused again."""
        from pion.server.dispatch import BLOCKED

        parked, self.postponed = self.postponed, OrderedDict()
        for client, argv in parked.values():
            if client.closing or client.conn is None or client.blocked is None:
                continue
            self.server.blocking.disconnect(client)  # forget the parking request, no reply
            reply = self.server.dispatcher.execute(client, argv)
            if reply is not BLOCKED and client.conn is not None:
                client.conn.resume_with(reply)


def _never_ready(ctx: Any) -> Any:
    return NOT_READY
