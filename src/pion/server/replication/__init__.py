"""Replication between Pions, on Redis's protocol: REPLICAOF, PSYNC/SYNC/REPLCONF, the backlog,
WAIT, ROLE and INFO replication (docs/replication.md).

``install(server)`` (make_server, after persistence) puts a ``Replication`` in
``server.parts.replication``: a journal observer feeds the primary side's stream, an admission check
refuses writes on a read-only replica, its component (``ReplicationPart``) follows ``replicaof``
from the config at start, answers INFO replication and in the cron pings replicas and
acknowledges to the primary, and a snapshot extension keeps a replica's replication id and
offset with its data.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Any

from pion.protocol.errors import ReplyError
from pion.server.component import Component
from pion.server.replication.primary import PrimarySide

if TYPE_CHECKING:
    from pion.server.app import Server
    from pion.server.replication.replica import ReplicaSide

log = logging.getLogger("pion.replication")

READONLY = "READONLY You can't write against a read only replica."
NOREPLICAS = "NOREPLICAS Not enough good replicas to write."


class Replication:
    """This server's replication state: a primary (always able to serve replicas) that may
    follow a primary of its own (``side``)."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.primary = PrimarySide(server, os.urandom(20).hex(), _backlog_size(server.settings.repl_backlog_size))
        self.side: ReplicaSide | None = None
        #: as a replica: the primary's replication id, the stream offset applied, and durable here
        self.replid_followed = ""
        self.offset = 0
        self.durable_offset = 0
        self.stream_db = 0
        self.ports: dict[int, int] = {}

    @property
    def is_replica(self) -> bool:
        return self.side is not None

    # -- following a primary ------------------------------------------------------------------------

    def follow(self, host: str, port: int) -> None:
        from pion.server.replication.replica import ReplicaSide

        if self.side is not None:
            self.side.stop()
        primary = self.primary
        primary.drop_links()  # its replicas resync with it, as Redis's replicationSetMaster makes them
        if primary.backlog is not None and not self.replid_followed:
            self.offset = self.durable_offset = primary.offset
        if self.replid_followed:  # a restart, or a new primary: serve the followed history from here
            primary.new_history(self.replid_followed, self.offset)
        primary.proxying = True
        self.side = ReplicaSide(self, host, port)
        self.side.start()
        log.info("following primary %s:%d", host, port)

    def followed(self, replid: str, offset: int, stream_db: int = 0) -> None:
        """A full resync loaded: this data is the primary's ``replid`` at ``offset``, its stream
        going on in database ``stream_db``."""
        self.replid_followed = replid
        self.offset = self.durable_offset = offset
        self.stream_db = stream_db
        self.primary.new_history(replid, offset)

    def continued(self, replid: str) -> None:
        """``+CONTINUE <another id>``: the primary was promoted meanwhile. The stream goes on;
        this server's replicas learn the id at their next PSYNC, as Redis's replid2 lets them."""
        primary = self.primary
        if replid == self.replid_followed:
            return
        primary.replid2, primary.second_offset = self.replid_followed or "0" * 40, self.offset + 1
        primary.replid = self.replid_followed = replid
        primary.drop_links()

    def promote(self) -> None:
        """REPLICAOF NO ONE: stop following; keep the data; serve writes. Replicas of the old
        primary that are at this server's offset (this server's own replicas included, which it
        drops so they ask again) may continue from it (Redis's replid2)."""
        side, self.side = self.side, None
        if side is None:
            return
        side.stop()
        primary = self.primary
        primary.proxying = False
        primary.drop_links()
        primary.replid2 = self.replid_followed or "0" * 40
        primary.second_offset = self.offset + 1
        primary.replid = os.urandom(20).hex()
        primary.backlog = None
        primary.start_backlog(self.offset)
        self.replid_followed = ""
        log.info("promoted to primary at offset %d (new replication id %s)", self.offset, primary.replid)

    def restore(self, replid: bytes, offset: bytes, db: bytes) -> None:
        """Replay of ``REPLCONF PION-OFFSET`` (this server's log) or of its snapshot's record."""
        self.replid_followed = replid.decode("latin-1")
        self.offset = self.durable_offset = int(offset)
        self.stream_db = int(db)

    # -- hooks ----------------------------------------------------------------------------------------

    def good_replicas_refusal(self, flags: Any) -> ReplyError | None:
        """-NOREPLICAS for a write on a primary while fewer than ``min-replicas-to-write`` replicas
        acknowledged within ``min-replicas-max-lag`` seconds (Redis's checkGoodReplicasStatus; also
        asked for a script's start and each of its writes)."""
        settings = self.server.settings
        wanted, max_lag = settings.min_replicas_to_write, settings.min_replicas_max_lag
        if self.side is not None or not wanted or not max_lag or "write" not in flags:
            return None
        if self.primary.good_replicas(max_lag) < wanted:
            return ReplyError(NOREPLICAS)
        return None

    def read_only_refusal(self, flags: Any) -> ReplyError | None:
        """-READONLY for a write (``flags``: the command's, EXEC's with what it queued) on a
        read-only replica; the primary's stream is applied by the replay path, not here."""
        if self.side is None or "write" not in flags:
            return None
        if self.server.settings.replica_read_only:
            return ReplyError(READONLY)
        return None

    def cron(self, server: Server) -> None:
        self.primary.backlog_size = _backlog_size(server.settings.repl_backlog_size)
        if self.primary.backlog is not None:
            self.primary.backlog.resize(self.primary.backlog_size)
        self.primary.cron(server.settings.repl_ping_replica_period)
        if self.side is not None:
            self.side.cron()

    def info(self, server: Server) -> dict[str, Any]:
        primary = self.primary
        backlog = primary.backlog
        fields: dict[str, Any] = {"role": "slave" if self.side is not None else "master"}
        if self.side is not None:
            fields.update(self.side.info_lines())
            fields.update({
                "slave_priority": server.settings.replica_priority,
                "slave_read_only": int(server.settings.replica_read_only),
                "replica_announced": 1,
            })
        fields.update(primary.info_lines())
        fields.update({
            "master_failover_state": "no-failover",
            "master_replid": self.replid_followed if self.side is not None else primary.replid,
            "master_replid2": primary.replid2,
            "master_repl_offset": self.offset if self.side is not None else primary.offset,
            "second_repl_offset": primary.second_offset,
            "repl_backlog_active": int(backlog is not None),
            "repl_backlog_size": primary.backlog_size,
            "repl_backlog_first_byte_offset": backlog.first if backlog is not None else 0,
            "repl_backlog_histlen": backlog.histlen if backlog is not None else 0,
        })
        return fields

    def role(self) -> list[Any]:
        if self.side is not None:
            side = self.side
            return [b"slave", side.host.encode(), side.port, side.role_state(), self.offset]
        return [b"master", self.primary.offset, self.primary.role_list()]

    # -- the snapshot extension -----------------------------------------------------------------------

    def dump(self) -> bytes:
        if self.side is None or not self.replid_followed:
            return b""
        return b"%s %d %d" % (self.replid_followed.encode(), self.offset, self.stream_db)

    def load(self, data: bytes) -> None:
        words = data.split()
        if len(words) == 3:
            self.restore(*words)


def _backlog_size(size: int) -> int:
    return max(16 * 1024, size)  # as Redis's CONFIG_REPL_BACKLOG_MIN_SIZE


def install(server: Server) -> Replication:
    repl = Replication(server)
    server.parts.replication = repl
    observers = getattr(server.journal, "observers", None)
    if observers is not None:
        observers.append(repl.primary.feed)
    server.admission.replication = repl  # -READONLY on a read-only replica (pion.server.admission)
    server.add_component(ReplicationPart(server, repl))
    persistence = server.parts.persistence
    if persistence is not None:
        from pion.server.durability.persistence import SnapshotExtension
        from pion.server.replication.fullsync import EXTENSION

        persistence.snapshot_extensions.append(SnapshotExtension(EXTENSION, repl.dump, repl.load))
    return repl


class ReplicationPart(Component):
    """Follows ``replicaof`` at start, feeds replicas in the cron, answers INFO ``# Replication``
    and adds the full/partial sync counts to ``# Stats``."""

    name = "replication"
    info_name = "replication"
    info_extends = ("stats",)

    def __init__(self, server: Server, repl: Replication) -> None:
        self.server, self.repl = server, repl

    async def start(self) -> None:
        target = self.server.settings.replicaof.split()
        if len(target) == 2:
            self.repl.follow(target[0], int(target[1]))

    def cron(self) -> None:
        self.repl.cron(self.server)

    def info_section(self) -> dict[str, Any]:
        return self.repl.info(self.server)

    def info_extra(self, section: str) -> dict[str, Any]:
        primary = self.repl.primary
        return {"sync_full": primary.full_syncs, "sync_partial_ok": primary.partial_syncs,
                "sync_partial_err": primary.partial_errors}
