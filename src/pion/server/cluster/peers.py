"""How nodes learn each other without a cluster bus: every node asks each node it knows for
``CLUSTER NODES`` over that node's ordinary client port, about once a second.

From a peer's answer this node takes (1) the peer's own line as the truth about the peer (its
id, which replaces a ``CLUSTER MEET`` placeholder, its config epoch and the slots it claims),
and (2) the other nodes it lists, which this node then polls too (so one MEET joins a node to
the whole cluster, as with Redis). A peer that does not list this node is sent ``CLUSTER MEET``
back. A peer that does not answer is shown ``fail?``; its slots stay its own (there is no
failover, so no one else could serve them). With ``masterauth`` (and ``masteruser``) set, the
poller authenticates first. Each exchange runs on the event loop with a timeout and never
blocks it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import TYPE_CHECKING

from pion.server.cluster.state import ClusterState, Node, parse_node_line

if TYPE_CHECKING:
    from pion.server.app import Server

log = logging.getLogger("pion.cluster")

POLL_INTERVAL = 1.0
TIMEOUT = 2.0


def _encode(*args: str) -> bytes:
    out = [b"*%d\r\n" % len(args)]
    for arg in args:
        data = arg.encode()
        out.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(out)


async def _read_reply(reader: asyncio.StreamReader) -> bytes | str:
    """One reply: a bulk string's bytes, or a simple/error line as text (``-ERR ...``)."""
    line = (await reader.readline()).rstrip(b"\r\n")
    if not line:
        raise ConnectionError("closed")
    if line[:1] == b"$":
        size = int(line[1:])
        if size < 0:
            return b""
        data = await reader.readexactly(size + 2)
        return data[:-2]
    return line.decode("utf-8", "replace")


class PeerPoller:
    def __init__(self, server: Server, state: ClusterState) -> None:
        self.server = server
        self.state = state
        self.links: dict[str, tuple[asyncio.StreamReader, asyncio.StreamWriter]] = {}
        self.task: asyncio.Task | None = None
        #: a change that must reach the config file (saved once per round)
        self.changed = False
        #: one round at a time (a MEET pokes a round while the periodic one may be running)
        self.round = asyncio.Lock()

    def start(self) -> None:
        self.task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self.task
        for _, writer in self.links.values():
            writer.close()
        self.links.clear()

    async def _run(self) -> None:
        while True:
            try:
                await self.poll_once()
            except asyncio.CancelledError:
                raise
            except Exception:  # the poller must never die
                log.exception("cluster peer poll failed")
            await asyncio.sleep(POLL_INTERVAL)

    async def poll_once(self) -> None:
        async with self.round:
            await self._round()

    async def _round(self) -> None:
        peers = [n for n in self.state.nodes.values() if not n.myself]
        await asyncio.gather(*(self._poll(node) for node in peers))
        for key in [k for k in self.links if k not in {self._key(n) for n in self.state.nodes.values()}]:
            self.links.pop(key)[1].close()
        if self.changed:
            self.changed = False
            self.state.save()

    @staticmethod
    def _key(node: Node) -> str:
        return f"{node.host}:{node.port}"

    async def _exchange(self, node: Node, *commands: tuple[str, ...]) -> list[bytes | str]:
        key = self._key(node)
        link = self.links.get(key)
        if link is None:
            reader, writer = await asyncio.wait_for(asyncio.open_connection(node.host, node.port), TIMEOUT)
            password = self.server.settings.masterauth
            if password:
                user = self.server.settings.masteruser
                writer.write(_encode("AUTH", *([user] if user else []), password))
                reply = await asyncio.wait_for(_read_reply(reader), TIMEOUT)
                if isinstance(reply, str) and reply.startswith("-"):
                    writer.close()
                    raise ConnectionError(f"AUTH refused: {reply[1:]}")
            link = self.links[key] = (reader, writer)
        reader, writer = link
        try:
            writer.write(b"".join(_encode(*c) for c in commands))
            return [await asyncio.wait_for(_read_reply(reader), TIMEOUT) for _ in commands]
        except BaseException:
            self.links.pop(key, None)
            writer.close()
            raise

    async def _poll(self, node: Node) -> None:
        node.ping_sent = int(time.time() * 1000)
        try:
            (reply,) = await self._exchange(node, ("CLUSTER", "NODES"))
        except (TimeoutError, OSError, ConnectionError, ValueError, asyncio.IncompleteReadError):
            if not node.unreachable:
                log.warning("cluster node %s (%s:%d) does not answer", node.id[:8], node.host, node.port)
            node.unreachable = True
            return
        if not isinstance(reply, bytes):
            node.unreachable = True
            return
        if node.unreachable:
            log.info("cluster node %s (%s:%d) answers again", node.id[:8], node.host, node.port)
        node.unreachable = False
        node.ping_sent = 0
        node.pong_recv = int(time.time() * 1000)
        await self._learn(node, reply.decode("utf-8", "replace"))

    async def _learn(self, node: Node, text: str) -> None:
        state = self.state
        knows_me = False
        for line in text.splitlines():
            words = line.split()
            if len(words) < 8:
                continue
            seen, claims = parse_node_line(words)
            if seen.myself:
                self._take_claims(node, seen, claims)
            elif seen.id == state.myself.id:
                knows_me = True
            elif state.find(seen.id) is None and not state.is_forgotten(seen.id) and not seen.handshake \
                    and seen.host and seen.port:
                state.add_node(Node(seen.id, seen.host, seen.port, seen.cport, epoch=seen.epoch))
                self.changed = True
        if not knows_me and node.id in state.nodes:
            me = state.myself
            with contextlib.suppress(Exception):
                await self._exchange(node, ("CLUSTER", "MEET", me.host, str(me.port)))

    def _take_claims(self, node: Node, seen: Node, claims: list[str]) -> None:
        """The peer's own line: its real id, epoch and slots (a higher epoch wins a slot)."""
        state = self.state
        if node.id != seen.id:
            if state.find(seen.id) is not None or state.is_forgotten(seen.id):
                state.remove_node(node)  # met twice, or a node we forgot: keep one entry
                self.changed = True
                return
            state.rename(node, seen.id)
            self.changed = True
        if node.epoch != seen.epoch:
            node.epoch = seen.epoch
            self.changed = True
        state.current_epoch = max(state.current_epoch, seen.epoch)
        claimed: set[int] = set()
        for item in claims:
            if item.startswith("["):
                continue
            start, _, end = item.partition("-")
            claimed.update(range(int(start), int(end or start) + 1))
        for slot in list(node.slots - claimed):  # it gave them up (DELSLOTS, SETSLOT NODE elsewhere)
            state.unassign(slot)
            self.changed = True
        for slot in claimed:
            owner = state.owner[slot]
            if owner is node:
                continue
            if owner is None or owner.epoch < node.epoch or (owner.epoch == node.epoch and not owner.myself
                                                              and owner.id < node.id):
                if owner is not None and owner.myself:
                    state.migrating.pop(slot, None)
                state.assign(slot, node)
                self.changed = True
