"""Clients blocked on keys (BLPOP, BZPOPMIN, XREAD BLOCK, ...), served in the order they blocked.

A blocking handler that finds nothing to pop returns ``BlockRequest``. The dispatcher parks the
client here; its connection stops reading further commands. When a command modifies a key some
client waits on, the key is marked ready; after that command finishes the dispatcher calls
``serve_ready``, which retries each waiting client's ``retry(ctx)`` in FIFO order as if that
client had just sent the command again. A retry returns ``NOT_READY`` to keep waiting.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pion.protocol.errors import ReplyError
from pion.protocol.resp import NULL_ARRAY

if TYPE_CHECKING:
    from pion.server.app import Server
    from pion.server.context import Ctx
    from pion.server.net.client import Client

NOT_READY = object()


@dataclass(eq=False)
class BlockRequest:
    """What a blocking handler returns when it must wait.

    Args:
        keys: keys (in the client's current db) whose modification may serve it.
        timeout: seconds; 0 blocks forever.
        retry: called with the client's ctx when a key is ready; returns a reply or NOT_READY.
        on_timeout: the reply sent when the timeout expires (null array for BLPOP).
        argv: the original command, for CLIENT LIST and the slowlog.
        usec: time spent running it (first try and retries), logged to the slowlog once it ends.
        wake: for a wait that time alone can end (XREADGROUP CLAIM: a pending entry grows idle
            enough), the seconds until the next retry worth making, or None; asked again after
            each retry that still finds nothing.
    """

    keys: list[bytes]
    timeout: float
    retry: Callable[[Ctx], Any]
    on_timeout: Any = NULL_ARRAY
    argv: list[bytes] = field(default_factory=list)
    db_index: int = 0
    db_id: int = 0
    timer: asyncio.TimerHandle | None = None
    usec: int = 0
    wake: Callable[[], float | None] | None = None
    wake_timer: asyncio.TimerHandle | None = None


class BlockingManager:
    def __init__(self, server: Server) -> None:
        self.server = server
        #: (Database.id, key) -> clients waiting on it, in arrival order
        self.waiting: dict[tuple[int, bytes], OrderedDict[int, Client]] = {}
        self.ready: list[tuple[int, bytes]] = []
        self.num_blocked = 0
        self.num_blocked_keys = 0

    def block(self, client: Client, request: BlockRequest) -> None:
        request.db_index = client.db_index
        request.db_id = client.dbs[client.db_index].id
        client.blocked = request
        self.num_blocked += 1
        for key in dict.fromkeys(request.keys):
            slot = (request.db_id, key)
            self.waiting.setdefault(slot, OrderedDict())[client.id] = client
        if request.timeout > 0:
            loop = asyncio.get_running_loop()
            request.timer = loop.call_later(request.timeout, self._time_out, client)
        self._arm_wake(client, request)

    def _arm_wake(self, client: Client, request: BlockRequest) -> None:
        if request.wake is None:
            return
        delay = request.wake()
        if delay is not None:
            request.wake_timer = asyncio.get_running_loop().call_later(max(delay, 0.001), self._wake, client, request)

    def _wake(self, client: Client, request: BlockRequest) -> None:
        """Time made the blocked command possibly servable: retry it as a key signal would."""
        request.wake_timer = None
        if client.blocked is not request:
            return
        self._retry(client, request)
        self.serve_ready()
        if client.blocked is request:
            self._arm_wake(client, request)

    def on_key_signal(self, db_id: int, key: bytes) -> None:
        if (db_id, key) in self.waiting:
            self.ready.append((db_id, key))

    def serve_ready(self) -> None:
        """Retry clients blocked on keys that changed; serving one may ready more keys."""
        while self.ready:
            ready, self.ready = self.ready, []
            slices = self.server.slices
            for slot in dict.fromkeys(ready):
                for client in list(self.waiting.get(slot, {}).values()):
                    if client.blocked is not None:
                        if slices.active and slices.holds_retry(slot[0], slot[1], client.blocked.argv):
                            continue  # it would write what a query in slices reads: after it
                        self._retry(client, client.blocked)

    def _retry(self, client: Client, request: BlockRequest) -> None:
        """Run a woken client's command as its own: invalidations of keys it changed itself
        follow its reply (Redis sets current_client to the unblocked one)."""
        tracking = self.server.tracking
        outer = tracking.current, tracking.pending
        tracking.current, tracking.pending = client, []
        try:
            reply = self.server.dispatcher.run_retry(client, request)
            if reply is not NOT_READY:
                self.unblock(client, reply)
            tracking.send_pending()
        finally:
            tracking.current, tracking.pending = outer

    def unblock(self, client: Client, reply: Any) -> None:
        request = client.blocked
        if request is None:
            return
        self._forget(client, request)
        if isinstance(reply, ReplyError):
            self.server.dispatcher.count_unblocked_error(request.argv, reply)
        if request.argv:  # as Redis: a blocked command is logged and timed when it ends
            if self.server.slowlog is not None:
                self.server.slowlog.observe(client, request.argv, request.usec)
            spec = self.server.dispatcher.lookup(request.argv)
            if not isinstance(spec, ReplyError):
                self.server.dispatcher.record_latency(spec, request.usec / 1e6)
            counters = self.server.dispatcher.slot_stats
            if counters is not None:  # CLUSTER SLOT-STATS counts a blocked command when it ends
                counters.add_cpu(client, request.usec)
                counters.add_in(client, request.argv)
        if client.conn is not None:
            client.conn.resume_with(reply)

    def unblock_by_request(self, client: Client, with_error: bool) -> bool:
        """CLIENT UNBLOCK: answer as on timeout, or with Redis's UNBLOCKED error."""
        request = client.blocked
        if request is None:
            return False
        reply = ReplyError("UNBLOCKED client unblocked via CLIENT UNBLOCK") if with_error else request.on_timeout
        self.unblock(client, reply)
        return True

    def disconnect(self, client: Client) -> None:
        if client.blocked is not None:
            self._forget(client, client.blocked)

    def _time_out(self, client: Client) -> None:
        request = client.blocked
        if request is not None:
            self.unblock(client, request.on_timeout)

    def _forget(self, client: Client, request: BlockRequest) -> None:
        client.blocked = None
        self.num_blocked -= 1
        if request.timer is not None:
            request.timer.cancel()
        if request.wake_timer is not None:
            request.wake_timer.cancel()
            request.wake_timer = None
        for key in request.keys:
            slot = (request.db_id, key)
            waiters = self.waiting.get(slot)
            if waiters is not None:
                waiters.pop(client.id, None)
                if not waiters:
                    del self.waiting[slot]
