"""Tenants: users whose data lives in keyspaces of their own (``--tenant NAME:PASSWORD[:quota=1gb]``,
``--tenants-file PATH``).

A tenant's connection sees its own list of databases (``client.dbs``), its own pub/sub hub, its
own K/V engine space and PION.STATS ledger, and only its own connections in CLIENT LIST/KILL.
Commands that act on the whole server (@admin, scripting, MEMORY STATS, ...) are refused with
``-NOPERM``. Each tenant database has an id unique server-wide and stable across restarts
(``(crc32c(name) | 1 << 32) << 16 | index``), so log records replay into the right keyspace; the
tenants' keys travel in snapshots as the ``tenants`` engine extension. An optional quota caps a
tenant's keys plus K/V rows: over it, commands that may grow memory get ``-OOM``; nothing of
anybody is evicted on a tenant's behalf.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import crc32c

from pion.config import ConfigError, Settings, parse_memory
from pion.protocol.errors import ReplyError
from pion.server.pubsub import TENANT_SHIFT
from pion.server.security.auth import digest, users_of
from pion.storage.memory import Accounting

if TYPE_CHECKING:
    from pion.server.app import Server
    from pion.server.context import Ctx
    from pion.server.net.client import Client
    from pion.server.registry import CommandSpec, CommandTable

log = logging.getLogger("pion.tenants")

NAME = re.compile(r"[A-Za-z0-9_-]{1,64}\Z")
SPEC_FORM = "a tenant is NAME:PASSWORD[:quota=SIZE] (NAME: 1-64 of A-Z a-z 0-9 _ -)"
INDEX_MASK = (1 << TENANT_SHIFT) - 1
#: commands a tenant may not run besides @admin and @scripting: they see or change the whole server
DENIED = frozenset({
    "memory|stats", "memory|doctor", "memory|malloc-stats", "memory|purge", "migrate", "kv.prefix.migrate", "pfdebug",
    "pfselftest", "replicaof", "slaveof", "sync", "psync", "failover", "module", "cluster",
    "eval", "evalsha", "eval_ro", "evalsha_ro", "script", "function", "fcall", "fcall_ro",
})
DENIED_CATEGORIES = ("@admin", "@scripting")
#: @admin commands a tenant may run: they are filtered to its own connections
ALLOWED = frozenset({"client|list", "client|kill"})
_RESCAN = frozenset({b"flushall", b"flushdb", b"swapdb"})
#: tenant keys per snapshot section (one record, one checksum)
SECTION_KEYS = 1000


@dataclass(slots=True)
class TenantSpec:
    name: str
    digest: bytes
    quota: int = 0


def parse_spec(text: str, where: str) -> TenantSpec:
    """``NAME:PASSWORD[:quota=SIZE]`` (the reference's ``NAME=PASSWORD`` too). Errors never
    repeat the text: it holds a password."""
    cuts = [i for i in (text.find(":"), text.find("=")) if i > 0]
    if not cuts:
        raise ConfigError(f"{where}: {SPEC_FORM}")
    name, password = text[: min(cuts)], text[min(cuts) + 1 :]
    if not NAME.match(name):
        raise ConfigError(f"{where}: {SPEC_FORM}")
    if name == "default":
        raise ConfigError(f"{where}: 'default' is the admin user (--requirepass), not a tenant")
    quota = 0
    if ":quota=" in password:
        password, _, raw = password.rpartition(":quota=")
        try:
            quota = parse_memory(raw)
        except ConfigError:
            raise ConfigError(f"{where}: tenant '{name}': quota must be a size like 512mb or 1gb") from None
    if not password:
        raise ConfigError(f"{where}: tenant '{name}' has an empty password")
    return TenantSpec(name, digest(password.encode()), quota)


def load_specs(settings: Settings) -> list[TenantSpec]:
    """The tenants of ``--tenant`` and ``--tenants-file`` (one spec a line, ``#`` comments)."""
    specs = [parse_spec(text, "--tenant") for text in settings.tenants]
    if settings.tenants_file:
        path = settings.tenants_file
        with open(path, encoding="utf-8") as handle:
            for number, line in enumerate(handle, 1):
                text = line.strip()
                if text and not text.startswith("#"):
                    specs.append(parse_spec(text, f"{path}:{number}"))
        if os.stat(path).st_mode & 0o077:
            log.warning("%s holds passwords and is readable by others: chmod 600 it", path)
    seen: dict[int, str] = {}
    for spec in specs:
        owner = owner_of(spec.name)
        if owner in seen:
            other = seen[owner]
            raise ConfigError(f"tenant '{spec.name}' is given twice" if other == spec.name else
                              f"tenants '{other}' and '{spec.name}' have colliding ids: rename one")
        seen[owner] = spec.name
    if specs and not settings.requirepass:
        raise ConfigError("--tenant needs --requirepass: the default user is the admin, and without a password "
                          "any client could skip AUTH and see every tenant's data")
    if specs and settings.databases > INDEX_MASK:
        raise ConfigError(f"with tenants, databases must be at most {INDEX_MASK}")
    return specs


def owner_of(name: str) -> int:
    """The stable, non-zero owner number in a tenant's database ids."""
    return crc32c.crc32c(name.encode()) | (1 << 32)


def tenant_db_id(name: str, index: int) -> int:
    return (owner_of(name) << TENANT_SHIFT) | index


# -- what a tenant may run ------------------------------------------------------------------------


def tenant_denied(spec: CommandSpec) -> bool:
    name = spec.full_name
    if name in ALLOWED:
        return False
    if name in DENIED or (spec.container is not None and spec.container in DENIED):
        return True
    return "admin" in spec.flags or any(cat in spec.categories for cat in DENIED_CATEGORIES)


def tenant_rules(table: CommandTable) -> str:
    """The ACL rule text that says what ``tenant_denied`` allows (ACL LIST / GETUSER)."""
    specs = [s for top in table for s in [top, *top.subcommands.values()] if s.handler is not None]
    known = {s.full_name for s in specs}
    cats = [c for c in DENIED_CATEGORIES if any(c in s.categories for s in specs)]
    extra = sorted(name for name in DENIED if name in known or any(k.startswith(name + "|") for k in known))
    allowed = sorted(name for name in ALLOWED if name in known)
    return " ".join(["+@all", *(f"-{c}" for c in cats), *(f"-{n}" for n in extra), *(f"+{n}" for n in allowed)])


def nopermission(client: Client, spec: CommandSpec) -> ReplyError:
    users_of(client.server).log.add(client, "command", spec.full_name, client.user)
    return ReplyError(f"NOPERM this user has no permissions to run the '{spec.full_name}' command")


# -- the engine ----------------------------------------------------------------------------------


class Tenants:
    """``server.parts.tenants``: the tenants' databases and quotas (their K/V spaces and
    ledgers are the K/V engine's, by tenant name)."""

    def __init__(self, server: Server, specs: list[TenantSpec]) -> None:
        self.server = server
        self.specs = {spec.name: spec for spec in specs}
        self.by_owner = {owner_of(spec.name): spec.name for spec in specs}
        self.accounting: dict[str, Accounting] = {}
        #: other engines' per-tenant bytes (an index, a cache): ``source(tenant name) -> bytes``
        self.usage_sources: list[Callable[[str], int]] = []
        users = users_of(server)
        for spec in specs:
            server.tenant_dbs[spec.name] = [
                server._make_db(i, tenant_db_id(spec.name, i)) for i in range(server.settings.databases)]
            self.accounting[spec.name] = Accounting(server.settings.databases)
            users.add_tenant(spec.name, spec.digest, spec.quota, tenant_rules(server.table).encode().split())

    # -- quota ---------------------------------------------------------------------------------

    def observe(self, effects: list[tuple[int, list[Any]]]) -> None:
        """A journal observer: refresh the size estimate of every tenant key a write touched."""
        for db_id, argv in effects:
            name = self.by_owner.get(db_id >> TENANT_SHIFT) if db_id >> TENANT_SHIFT else None
            if name is None:
                continue
            accounting, dbs = self.accounting[name], self.server.tenant_dbs[name]
            spec = self.server.dispatcher.lookup([bytes(a) if a.__class__ is memoryview else a for a in argv[:2]]
                                                 + list(argv[2:]))
            positions = [] if isinstance(spec, ReplyError) else spec.key_positions(argv)
            if not positions:
                if bytes(argv[0]).lower() in _RESCAN:
                    accounting.rescan(dbs)
                continue
            touched = [dbs[db_id & INDEX_MASK]]
            if spec.name in ("move", "copy"):  # the key may land in another of its databases
                touched = dbs
            for position in positions:
                for db in touched:
                    accounting.update(db, bytes(argv[position]))

    def used(self, name: str) -> int:
        """Every byte the quota counts: key estimates, K/V rows and SSM blobs, STATE buffers,
        V.EXPORT files, replies its connections have not read yet, and whatever other engines
        report through ``usage_sources`` (``source(name) -> bytes``: indexes, caches)."""
        total = self.accounting[name].used
        kv = self.server.parts.kvcache
        if kv is not None and name.encode() in kv.spaces:
            space = kv.space(name.encode())
            total += space.nbytes + space.state.nbytes + space.exports.nbytes
        held = self.server.held_output
        if held:
            total += sum(size for conn, size in held.items() if conn.client is not None and conn.client.tenant == name)
        for source in self.usage_sources:
            total += source(name)
        return total

    def quota_refusal(self, client: Client, spec: CommandSpec, argv: list | None = None) -> ReplyError | None:
        """Before a command that may grow memory: -OOM if the tenant is over its quota, or would
        be with the bytes the request brings (its arguments; a command that allocates more than
        it is sent checks ``charge`` itself)."""
        tenant = self.specs.get(client.tenant)  # type: ignore[arg-type]
        quota = tenant.quota if tenant is not None else 0
        if not quota or "denyoom" not in spec.flags:
            return None
        incoming = sum(len(arg) for arg in argv[1:]) if argv else 0
        return self._over(client.tenant, quota, incoming)  # type: ignore[arg-type]

    def charge(self, client: Client, nbytes: int, what: str = "the command") -> ReplyError | None:
        """-OOM if ``nbytes`` more (a STATE buffer, an export file, a reply) would pass the quota."""
        tenant = self.specs.get(client.tenant) if client.tenant is not None else None
        if tenant is None or not tenant.quota:
            return None
        return self._over(tenant.name, tenant.quota, nbytes, what)

    def _over(self, name: str, quota: int, incoming: int, what: str = "") -> ReplyError | None:
        used = self.used(name)
        if used + incoming <= quota:
            return None
        extra = f"; {what} needs {incoming} more" if what else ""
        return ReplyError(f"OOM command not allowed when used memory > 'maxmemory' (tenant '{name}' "
                          f"uses {used} bytes of its {quota}-byte quota{extra})")

    def rescan(self) -> None:
        for name, dbs in self.server.tenant_dbs.items():
            if name in self.accounting:
                self.accounting[name].rescan(dbs)

    # -- snapshots -----------------------------------------------------------------------------

    def dump(self) -> bytes:
        """Every tenant's keys in one piece (``sections`` is what snapshots write)."""
        from pion.storage.serialize import pack_tree, unpack_tree

        tenants: dict[bytes, list] = {}
        for section in self.sections():
            for raw, records in unpack_tree(section)[b"tenants"].items():
                tenants.setdefault(raw, []).extend(records)
        return pack_tree({b"version": 1, b"tenants": tenants})

    def sections(self) -> list[bytes]:
        """Every tenant's keys for the snapshot (called at its consistent point), in sections of
        at most SECTION_KEYS keys of one tenant, each its own record with its own checksum: a
        damaged record of a salvaged snapshot costs those keys, not every tenant's data."""
        from pion.storage.serialize import dump_value, pack_tree

        out: list[bytes] = []
        for name, dbs in self.server.tenant_dbs.items():
            batch: list = []
            for db in dbs:
                for key, value in db.data.items():
                    batch.append((db.index, key, db.expires.get(key, -1), dump_value(value)))
                    if len(batch) >= SECTION_KEYS:
                        out.append(pack_tree({b"version": 1, b"tenants": {name.encode(): batch}}))
                        batch = []
            if batch:
                out.append(pack_tree({b"version": 1, b"tenants": {name.encode(): batch}}))
        return out

    def load(self, data: bytes) -> None:
        """One section (the keyspaces were emptied before the load began)."""
        from pion.storage.recovery import RecoveryError
        from pion.storage.serialize import load_value, unpack_tree

        tree = unpack_tree(data)
        for raw, records in tree[b"tenants"].items():
            name = raw.decode()
            dbs = self.server.tenant_dbs.get(name)
            if dbs is None:
                raise RecoveryError(f"the snapshot holds data of tenant '{name}', which is not configured: "
                                    "start with the same --tenant list as the server that wrote it")
            accounting = self.accounting.get(name)
            for index, key, expire, payload in records:
                dbs[index].set(key, load_value(payload))
                if expire >= 0:
                    dbs[index].set_expire(key, expire)
                if accounting is not None:
                    accounting.update(dbs[index], key)


def tenants_of(server: Server) -> Tenants | None:
    return server.parts.tenants


# -- views a tenant gets -------------------------------------------------------------------------


def visible_clients(ctx: Ctx) -> dict[int, Client]:
    """CLIENT LIST/KILL: a tenant sees only its own connections; the admin sees all."""
    tenant = ctx.client.tenant
    clients = ctx.server.clients
    if tenant is None:
        return clients
    return {cid: c for cid, c in clients.items() if c.tenant == tenant}


def tenant_info(ctx: Ctx, names: list[str]) -> str:
    """INFO for a tenant: server, its own clients, memory (its usage and quota) and keyspace."""
    server, tenant = ctx.server, ctx.client.tenant
    engine = ctx.server.parts.tenants
    used, quota = engine.used(tenant), engine.specs[tenant].quota
    sections: dict[str, dict[str, Any]] = {
        "server": server.info_sections["server"](server),
        "clients": {"connected_clients": sum(1 for c in server.clients.values() if c.tenant == tenant)},
        "memory": {"used_memory": used, "used_memory_human": _human(used), "maxmemory": quota,
                   "maxmemory_human": _human(quota), "maxmemory_policy": "noeviction"},
        "keyspace": {f"db{db.index}": f"keys={len(db.data)},expires={len(db.expires)},avg_ttl={db.avg_ttl}"
                     for db in ctx.client.dbs if db.data},
    }
    wanted = [n.lower() for n in names] or ["default"]
    every = any(n in ("default", "all", "everything") for n in wanted)
    parts = []
    for name, fields in sections.items():
        if every or name in wanted:
            body = "".join(f"{key}:{value}\r\n" for key, value in fields.items())
            parts.append(f"# {name.capitalize()}\r\n{body}")
    return "\r\n".join(parts)


def _human(size: int) -> str:
    for unit, scale in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if size >= scale:
            return f"{size / scale:.2f}{unit}"
    return f"{size}B"


def install(server: Server, specs: list[TenantSpec]) -> Tenants:
    """Create the tenants' databases and users, count their memory, put their keys in snapshots."""
    engine = server.parts.tenants = Tenants(server, specs)
    observers = getattr(server.journal, "observers", None)
    if observers is not None:
        observers.append(engine.observe)
    persistence = server.parts.persistence
    if persistence is not None:
        from pion.server.durability.persistence import SnapshotExtension

        persistence.snapshot_extensions.append(SnapshotExtension("tenants", engine.dump, engine.load, engine.sections))
    server.startup_hooks.append(lambda srv: engine.rescan())  # after recovery filled the keyspaces
    if specs:
        log.info("tenants: %s", ", ".join(spec.name for spec in specs))
    return engine
