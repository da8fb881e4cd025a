"""What durability hands the server: recovery at start, the final save and the close at stop,
the cron, CONFIG SET, INFO ``# Persistence``, admission, DEBUG RELOAD and friends.

Recovery replays the log through the same command code as live traffic
(``dispatcher.replay``). A blob argument arrives as a ``memoryview`` of its mapped arena for
commands flagged ``zero_copy`` (nothing is read from disk), as checked ``bytes`` otherwise.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from typing import TYPE_CHECKING, Any

from pion.protocol.errors import ReplyError
from pion.protocol.resp import OK
from pion.server.component import Component
from pion.server.durability.fault_commands import debug_sysfault
from pion.server.errors import StartupError
from pion.storage.arena import ArenaError, BlobRef, snapshot_scope
from pion.storage.recovery import RecoveryError, recover
from pion.storage.serialize import PayloadError, load_value

if TYPE_CHECKING:
    from pion.config import Settings
    from pion.server.app import Server
    from pion.server.durability.persistence import Persistence

log = logging.getLogger("pion.persistence")


def wire(server: Server, owner: Persistence) -> None:
    server.parts.persistence = owner
    server.parts.memory = owner.memory
    server.admission.durability = owner
    server.admission.memory = owner.memory
    server.debug_hooks["reload"] = lambda ctx, argv: debug_reload(owner, argv)
    server.debug_hooks["loadaof"] = lambda ctx, argv: debug_loadaof(owner)
    server.debug_hooks["panic"] = lambda ctx, argv: debug_panic(owner)
    server.debug_hooks["segfault"] = lambda ctx, argv: debug_segfault(owner)
    server.debug_hooks["fault"] = lambda ctx, argv: debug_fault(argv)
    server.debug_hooks["sysfault"] = lambda ctx, argv: debug_sysfault(owner.directory, argv)
    server.add_component(Durability(owner))


class Durability(Component):
    """Added first: recovery is the first start-up step (the keyspace is full before any other
    part starts or a listener opens); stopped last: the log closed, the lock released. Its final
    save is ``FinalSave``, a part of its own the assembler adds last."""

    name = "durability"
    info_name = "persistence"

    def __init__(self, owner: Persistence) -> None:
        self.owner = owner

    async def start(self) -> None:
        owner = self.owner
        owner.crash.start()
        try:
            load(owner)
        except BaseException as exc:
            owner.crash.stop(f"start refused: {exc}")
            owner.journal.close()
            owner.lock.release()
            raise
        owner.journal.start(asyncio.get_running_loop()) if hasattr(owner.journal, "start") else None
        owner.arenas.start_verifier()  # check the mapped blobs' crc in the background
        owner.started = True
        owner.status.tick(force=True)

    async def stop(self) -> None:
        close(self.owner)

    def cron(self) -> None:
        self.owner.cron(self.owner.server)

    def config_changed(self, old: Settings, new: Settings) -> str | None:
        return self.owner.config_changed(self.owner.server, old, new)

    def info_section(self) -> dict[str, Any]:
        return self.owner.info(self.owner.server)


class FinalSave(Component):
    """Shutdown's save, before any engine tears its state down (the MoE tier forgets its models,
    search closes its indexes: their snapshot extensions read them): the assembler adds it after
    every engine, so it stops before them (``Component.stop`` runs in reverse)."""

    name = "final-save"

    def __init__(self, owner: Persistence) -> None:
        self.owner = owner

    async def stop(self) -> None:
        await final_save(self.owner)


def load(owner: Persistence) -> None:
    """Snapshot then log into the (empty) keyspace; raises StartupError when it cannot."""
    server = owner.server
    replayer = Replayer(owner)
    server.loading = True
    for db in [db for dbs in server.all_db_lists() for db in dbs]:  # tenants' databases too
        db.loading = True
    try:
        with snapshot_scope(owner.arenas):
            owner.recovery = recover(
                owner.directory, replayer.load_key, replayer.drop_key, replayer.load_extension,
                replayer.apply, replay=server.settings.appendonly,
            )
    except RecoveryError as exc:
        raise StartupError(str(exc)) from None
    finally:
        server.loading = False
        for db in [db for dbs in server.all_db_lists() for db in dbs]:
            db.loading = False
    report = owner.recovery
    owner.snapshot_bytes = _snapshot_size(owner)
    owner.memory.follow_settings(owner.journal)
    if owner.memory.active:
        owner.memory.rescan()
    server.replayed_records = report.records  # KV.PREFIX.INFO's wal_replayed
    if replayer.failed:
        log.warning("%d logged commands failed again on replay (first: %s)", replayer.failed, replayer.first_failure)
    log.info(
        "data loaded: %d keys from the snapshot, %d log records in %d segments, in %.3f seconds",
        report.snapshot_keys, report.records, report.segments, report.seconds,
    )


def _snapshot_size(owner: Persistence) -> int:
    from pion.storage.snapshot import FILENAME

    path = os.path.join(owner.directory, FILENAME)
    return os.path.getsize(path) if os.path.exists(path) else 0


class Replayer:
    """The callbacks recovery calls: keys from the snapshot, effects from the log."""

    def __init__(self, owner: Persistence) -> None:
        self.owner = owner
        self.server = owner.server
        self.failed = 0
        self.first_failure = ""

    def load_key(self, record: Any) -> None:
        try:
            value = load_value(record.value)
        except (PayloadError, ArenaError) as exc:
            raise RecoveryError(f"snapshot: key {record.key!r} in db {record.db} cannot be loaded: {exc}") from None
        db = self._db(record.db)
        db.set(record.key, value)
        if record.expire_ms is not None:
            db.set_expire(record.key, record.expire_ms)

    def drop_key(self, record: Any) -> None:
        self._db(record.db).delete(record.key)

    def load_extension(self, record: Any) -> None:
        for ext in self.owner.snapshot_extensions:
            if ext.name == record.name:
                ext.load(bytes(record.data))
                return
        raise RecoveryError(
            f"the snapshot holds state of the '{record.name}' engine, which this server does not run "
            "(start it with the same options as before, e.g. --kvcache)"
        )

    def _db(self, index: int) -> Any:
        if index >= len(self.server.dbs):
            raise RecoveryError(f"data for db {index}, but the server has {len(self.server.dbs)} databases")
        return self.server.dbs[index]

    def apply(self, db_index: int, args: list[Any]) -> None:
        server = self.server
        dispatcher = server.dispatcher
        head = [arg if arg.__class__ is not BlobRef else b"" for arg in args[:2]]
        spec = dispatcher.lookup(head + [b""] * (len(args) - len(head)))
        if spec.__class__ is ReplyError:
            raise RecoveryError(
                f"the log holds a command this server cannot run ({spec.message}); start it with the "
                "same options as the server that wrote the log (e.g. --kvcache)"
            )
        zero_copy = "zero_copy" in spec.flags  # type: ignore[union-attr]
        argv = [arg if arg.__class__ is not BlobRef else self._blob(arg, zero_copy) for arg in args]
        try:  # a tenant's records name its own databases' server-wide ids
            client = server.replay_target(db_index)
        except KeyError as exc:
            raise RecoveryError(
                f"{exc.args[0]}; start with the same --tenant list as the server that wrote the log") from None
        try:
            reply = dispatcher.replay(client, argv)
        except ReplyError as exc:
            reply = exc
        finally:
            client.ctx.effects = None  # do not keep the last record's blob views alive
        if isinstance(reply, ReplyError):
            self.failed += 1
            if not self.first_failure:
                self.first_failure = f"{args[0]!r}: {reply.message}"

    def _blob(self, ref: BlobRef, zero_copy: bool) -> bytes | memoryview:
        try:
            view = self.owner.arenas.view(ref)
        except ArenaError as exc:
            raise RecoveryError(f"{exc}: the arena file is missing or short") from None
        if zero_copy:
            return view
        data = bytes(view)
        import crc32c

        if crc32c.crc32c(data) != ref.crc:
            raise RecoveryError(f"blob {ref} does not match its checksum (arena {ref.arena_id} is damaged)")
        return data


async def final_save(owner: Persistence) -> None:
    """Shutdown: cancel a background save, save if snapshots are the only persistence."""
    server = owner.server
    task = owner.task
    if task is not None:
        task.cancel()
        with contextlib.suppress(BaseException):
            await task
        owner.job = None
    mode = server.shutdown_mode  # SHUTDOWN SAVE has saved already
    if mode == "default" and owner.started and not server.settings.appendonly and server.dirty \
            and server.settings.save.strip():
        try:
            owner.save()
        except ReplyError:
            log.error("could not save the snapshot at shutdown")


def close(owner: Persistence) -> None:
    """Shutdown, after every other part stopped: the log closed, the status file says so, the
    crash log stops and the data directory is unlocked."""
    owner.journal.close()
    owner.status.tick(force=True, state="stopped")
    owner.crash.stop()
    owner.lock.release()


def debug_reload(owner: Persistence, argv: list[bytes]) -> Any:
    """DEBUG RELOAD: save a snapshot, empty the keyspace, load it back (all blocking)."""
    if len(argv) > 2:
        return ReplyError("ERR DEBUG RELOAD options (MERGE, NOFLUSH, NOSAVE) are not supported by Pion")
    owner.save()
    return _reload(owner, "the snapshot")


def debug_loadaof(owner: Persistence) -> Any:
    """DEBUG LOADAOF: empty the keyspace and load it back from the snapshot and the log, as a
    restart would, without saving first: what comes back is what the logged effects rebuild.
    A client's earlier writes are in the log already (its replies wait for that)."""
    if not owner.server.settings.appendonly:
        return ReplyError("ERR DEBUG LOADAOF needs appendonly yes: the log is what it loads")
    return _reload(owner, "the log")


def _reload(owner: Persistence, what: str) -> Any:
    """Empty every keyspace (tenants' too: the load fills them all) and load it back from disk."""
    for db in [db for dbs in owner.server.all_db_lists() for db in dbs]:
        db.flush()
    try:
        load(owner)
    except Exception as exc:  # the reply says why; the server keeps what it loaded
        return ReplyError(f"ERR Error trying to load {what}: {exc}")
    return OK


def debug_panic(owner: Persistence) -> Any:
    """DEBUG PANIC: the crash line (time, cause, last command), then abort as Redis does."""
    owner.crash.crash("panic: DEBUG PANIC", command="debug|panic")
    os.abort()


def debug_segfault(owner: Persistence) -> Any:
    """DEBUG SEGFAULT: a real SIGSEGV; faulthandler writes the traceback to the crash log."""
    import ctypes

    ctypes.string_at(0)


def debug_fault(argv: list[bytes]) -> Any:
    """DEBUG FAULT <point> <ENOSPC|EIO|...|OFF> [count] | DEBUG FAULT LIST | DEBUG FAULT OFF:
    make the storage's next writes at ``point`` fail (``pion.storage.faults``), for fault tests."""
    from pion.storage import faults

    words = [bytes(a).decode("latin-1") for a in argv[2:]]
    if words in (["OFF"], ["off"]):
        faults.disarm()
        return OK
    if [w.lower() for w in words] == ["list"]:
        return [f"{point} errno={code} left={left}".encode() for point, (code, left) in sorted(faults.armed().items())]
    if len(words) not in (2, 3):
        raise ReplyError("ERR DEBUG FAULT <point> <ERRNO|OFF> [count] | LIST | OFF")
    point, name = words[0].lower(), words[1]
    if name.upper() == "OFF":
        faults.disarm(point)
        return OK
    try:
        count = int(words[2]) if len(words) == 3 else -1
        faults.arm(point, name, count)
    except ValueError as exc:
        raise ReplyError(f"ERR DEBUG FAULT: {exc}") from None
    return OK
