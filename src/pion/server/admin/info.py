"""INFO: the section registry and the text it renders, in Redis 7's format and order.

``server.info_sections`` maps a section name to a function ``fn(server) -> {field: value}``;
``default_info_sections`` fills in Redis's sections, and engines add their own (the kv cache's
``pion``) or replace a default (the persistence engine's ``persistence``). Sections an engine
adds are shown by plain INFO as well, after Redis's own, as Redis shows module sections.

Fields Pion cannot measure (network byte counts, allocator statistics) are left out rather than
reported as zero. Must not import ``pion.server.app``.
"""

from __future__ import annotations

import os
import platform
import resource
import sys
import time
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pion import __version__

if TYPE_CHECKING:
    from pion.server.app import Server

#: the Redis version Pion claims: Redis 8.4, whose core commands (HGETEX ... XACKDEL, DELEX, DIGEST,
#: MSETEX, SET IFEQ) it implements and whose Query Engine (BM25STD, ``@search``/``@json``,
#: FT.HYBRID) and vector sets it follows; clients gate features and tests on it
REDIS_VERSION = "8.4.0"
Section = Callable[["Server"], dict[str, Any]]

#: Redis's section titles; an engine's section is titled by capitalizing its name
TITLES = {"cpu": "CPU", "commandstats": "Commandstats", "errorstats": "Errorstats"}
#: sections plain INFO (``default``) leaves out
NOT_DEFAULT = {"commandstats", "latencystats"}
_peaks: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()


def render_info(server: Server, names: list[str]) -> str:
    """The INFO text for the requested section names (``default``, ``all``, ``everything`` too)."""
    sections = server.info_sections
    wanted = [name.lower() for name in names] or ["default"]
    chosen: list[str] = []
    for name in sections:
        everything = "everything" in wanted or "all" in wanted
        default = "default" in wanted and name not in NOT_DEFAULT
        if everything or default or name in wanted:
            chosen.append(name)
    parts = []
    for name in chosen:
        fields = sections[name](server)
        lines = [f"# {TITLES.get(name, name.capitalize())}\r\n"]
        for key, value in fields.items():  # a list value is one line per item (``module:...``)
            lines.extend(f"{key}:{_format(item)}\r\n" for item in (value if isinstance(value, list) else [value]))
        parts.append("".join(lines))
    return "\r\n".join(parts)


def _format(value: Any) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, float):
        return "%.2f" % value
    return str(value)


def human_bytes(n: int) -> str:
    """Redis's bytesToHuman: ``1.11M``."""
    for unit, size in (("P", 1024**5), ("T", 1024**4), ("G", 1024**3), ("M", 1024**2), ("K", 1024)):
        if n >= size:
            return "%.2f%s" % (n / size, unit)
    return f"{n}B"


def rss_bytes() -> int:
    try:
        with open("/proc/self/statm", encoding="ascii") as handle:
            return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def used_memory(server: Server) -> int:
    """The memory engine's account when there is one, else the process's resident size."""
    memory = server.parts.memory
    if memory is not None and hasattr(memory, "used_memory"):
        return int(memory.used_memory())
    return rss_bytes()


# -- the sections ---------------------------------------------------------------------------------


def server_section(server: Server) -> dict[str, Any]:
    now = time.time()
    uptime = int(now - server.start_time)
    fields: dict[str, Any] = {
        "redis_version": REDIS_VERSION, "pion_version": __version__, "redis_git_sha1": "00000000",
        "redis_git_dirty": 0, "redis_build_id": "0", "redis_mode": "standalone",
        "os": f"{platform.system()} {platform.release()} {platform.machine()}",
        "arch_bits": 64 if sys.maxsize > 2**32 else 32, "monotonic_clock": "POSIX clock_gettime",
        "multiplexing_api": "epoll" if sys.platform.startswith("linux") else "kqueue",
        "python_version": platform.python_version(), "process_id": os.getpid(), "process_supervised": "no",
        "run_id": server.run_id, "tcp_port": server.bound_port, "server_time_usec": int(now * 1_000_000),
        "uptime_in_seconds": uptime, "uptime_in_days": uptime // 86400, "hz": server.settings.hz,
        "configured_hz": server.settings.hz, "lru_clock": int(now) & ((1 << 24) - 1),
        "executable": sys.executable, "config_file": server.settings.config_file, "io_threads_active": 0,
    }
    if server.settings.port:
        bind = ",".join(server.settings.bind)
        fields["listener0"] = f"name=tcp,bind={bind},port={server.bound_port}"
    if server.settings.unixsocket:
        fields["listener1"] = f"name=unix,bind={server.settings.unixsocket}"
    return fields


def clients_section(server: Server) -> dict[str, Any]:
    return {
        "connected_clients": len(server.clients), "cluster_connections": 0,
        "maxclients": server.settings.maxclients, "blocked_clients": server.blocking.num_blocked,
        "tracking_clients": server.tracking.clients, "clients_in_timeout_table": sum(
            1 for c in server.clients.values() if c.blocked is not None and c.blocked.timeout > 0),
        "total_blocking_keys": len(server.blocking.waiting), "total_blocking_keys_on_nokey": 0,
    }


def script_counts(server: Server) -> dict[str, int]:
    """Redis's script cache and function counts (the suite reads them after SCRIPT FLUSH); the
    scripting engine is installed lazily, so a server that never ran a script has none."""
    engine = server.parts.scripting
    scripts = getattr(engine, "scripts", {})
    libraries = getattr(engine, "libraries", None)
    return {
        "number_of_cached_scripts": len(scripts),
        "number_of_functions": len(libraries.functions) if libraries is not None else 0,
        "number_of_libraries": len(libraries.libraries) if libraries is not None else 0,
    }


def memory_section(server: Server) -> dict[str, Any]:
    used, rss = used_memory(server), rss_bytes()
    peak = max(_peaks.get(server, 0), used)
    _peaks[server] = peak
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    maxmemory = server.settings.maxmemory
    return {
        "used_memory": used, "used_memory_human": human_bytes(used), "used_memory_rss": rss,
        "used_memory_rss_human": human_bytes(rss), "used_memory_peak": peak,
        "used_memory_peak_human": human_bytes(peak), "used_memory_peak_perc": "%.2f%%" % (100 * used / peak if peak else 100.0),
        "total_system_memory": total, "total_system_memory_human": human_bytes(total),
        **script_counts(server), "maxmemory": maxmemory, "maxmemory_human": human_bytes(maxmemory),
        "maxmemory_policy": server.settings.maxmemory_policy, "mem_allocator": "pymalloc",
        "lazyfree_pending_objects": 0,
        "mem_not_counted_for_evict": 0,  # maxmemory counts the dataset only: nothing is left out of it
        # what maxmemory does not cover: the interpreter and libraries at start, and how much
        # more the process holds than its data (allocator slack, freed memory not returned)
        "used_memory_startup": _startup_rss.get(server, 0),
        "mem_clients_normal": sum(server.held_output.values()),
        "mem_fragmentation_ratio": "%.2f" % (max(rss - _startup_rss.get(server, 0), 0) / used if used else 0.0),
    }


#: each server's resident size when it became ready (INFO used_memory_startup)
_startup_rss: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()


def note_startup_memory(server: Server) -> None:
    _startup_rss[server] = rss_bytes()


def persistence_section(server: Server) -> dict[str, Any]:
    """The default until a persistence engine registers its own: the journal's state only."""
    return {
        "loading": int(server.loading), "async_loading": 0, "rdb_changes_since_last_save": server.dirty,
        "rdb_bgsave_in_progress": 0, "rdb_last_save_time": int(server.start_time),
        "rdb_last_bgsave_status": "ok", "aof_enabled": int(server.settings.appendonly),
        "aof_rewrite_in_progress": 0, "aof_last_write_status": "ok",
    }


def stats_section(server: Server) -> dict[str, Any]:
    hub = server.pubsub
    return {
        "total_connections_received": server.stat_numconnections,
        "total_commands_processed": server.stat_numcommands,
        "rejected_connections": server.stat_rejected_conn, "expired_keys": server.stat_expired,
        "evicted_keys": server.stat_evicted, "keyspace_hits": server.stat_keyspace_hits,
        "keyspace_misses": server.stat_keyspace_misses, "pubsub_channels": len(hub.channels),
        "pubsub_patterns": len(hub.patterns), "pubsubshard_channels": len(hub.shard_channels),
        "migrate_cached_sockets": 0,  # MIGRATE opens a connection per call (commands/core/migrate.py)
        **{k: v for k, v in server.tracking.info().items() if k != "tracking_clients"},  # that one is in clients
        "total_error_replies": sum(server.error_stats.values()),
        **{f"pion_{k}": v for k, v in server.slices.stats.items()},  # queries in slices (server/slices.py)
    }  # rejected/failed calls are per command in commandstats: Redis's default INFO has no totals


def replication_section(server: Server) -> dict[str, Any]:
    return {
        "role": "master", "connected_slaves": 0, "master_failover_state": "no-failover",
        "master_replid": server.run_id, "master_replid2": "0" * 40, "master_repl_offset": 0,
        "second_repl_offset": -1, "repl_backlog_active": 0,
        "repl_backlog_size": server.settings.repl_backlog_size,
        "repl_backlog_first_byte_offset": 0, "repl_backlog_histlen": 0,
    }


def cpu_section(server: Server) -> dict[str, Any]:
    me = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    fields = {
        "used_cpu_sys": "%.6f" % me.ru_stime, "used_cpu_user": "%.6f" % me.ru_utime,
        "used_cpu_sys_children": "%.6f" % children.ru_stime, "used_cpu_user_children": "%.6f" % children.ru_utime,
    }
    if hasattr(resource, "RUSAGE_THREAD"):
        thread = resource.getrusage(resource.RUSAGE_THREAD)
        fields["used_cpu_sys_main_thread"] = "%.6f" % thread.ru_stime
        fields["used_cpu_user_main_thread"] = "%.6f" % thread.ru_utime
    return fields


def commandstats_section(server: Server) -> dict[str, Any]:
    out = {}
    for name, (calls, usec, rejected, failed) in server.dispatcher.stats.items():
        per_call = usec / calls if calls else 0.0
        out[f"cmdstat_{name.lower()}"] = (
            f"calls={calls},usec={usec},usec_per_call={per_call:.2f},rejected_calls={rejected},failed_calls={failed}")
    return out


def errorstats_section(server: Server) -> dict[str, Any]:
    return {f"errorstat_{prefix}": f"count={count}" for prefix, count in server.error_stats.items()}


def keyspace_section(server: Server) -> dict[str, Any]:
    return {
        f"db{db.index}": f"keys={len(db.data)},expires={len(db.expires)},avg_ttl={db.avg_ttl}"
        for db in server.dbs if db.data
    }


def modules_section(server: Server) -> dict[str, Any]:
    """One ``module:name=search,ver=80400,api=1,...`` line per entry of MODULE LIST (the built-in
    engines that stand in for Redis 8's modules), as Redis writes them; redis-py's module gate reads
    this section."""
    lines = [f"name={entry[b'name'].decode()},ver={entry[b'ver']},api=1,filters=0,usedby=[],using=[],"
             "options=[handle-io-errors]" for entry in server.parts.modules]
    return {"module": lines} if lines else {}


def _cluster(server: Server) -> dict[str, Any]:
    return {"cluster_enabled": 0}


def default_info_sections() -> dict[str, Section]:
    """Redis 7's sections in Redis's order (``everything``); engines append theirs after."""
    return {
        "server": server_section, "clients": clients_section, "memory": memory_section,
        "persistence": persistence_section, "stats": stats_section, "replication": replication_section,
        "cpu": cpu_section, "modules": modules_section, "commandstats": commandstats_section,
        "errorstats": errorstats_section, "cluster": _cluster, "keyspace": keyspace_section,
    }


def add_section_before(sections: dict[str, Section], before: str, name: str, section: Section) -> None:
    """Add a section just before ``before`` (at the end when there is none)."""
    ordered = list(sections.items())
    at = next((i for i, (key, _) in enumerate(ordered) if key == before), len(ordered))
    ordered.insert(at, (name, section))
    sections.clear()
    sections.update(ordered)


def reset_stats(server: Server) -> None:
    """CONFIG RESETSTAT: the counters INFO stats, commandstats and errorstats show."""
    server.dispatcher.stats.clear()
    server.error_stats.clear()
    for name in ("stat_numcommands", "stat_numconnections", "stat_rejected_conn", "stat_rejected", "stat_failed",
                 "stat_expired", "stat_evicted", "stat_keyspace_hits", "stat_keyspace_misses"):
        setattr(server, name, 0)
    _peaks.pop(server, None)
    server.latency.histograms.clear()  # LATENCY HISTOGRAM, INFO latencystats
    for component in server.components:
        component.resetstat()
