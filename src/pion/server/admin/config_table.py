"""Every Redis 7 configuration parameter: its type, default, bounds and flags, as Redis's config.c.

CONFIG GET/SET and CONFIG REWRITE read this table, so a client or tool may set any parameter
Redis 7.2 knows and gets Redis's answer, its error texts and its normalized value (``1kb`` reads
back as ``1024``, ``KEA`` as ``AKE``). Parameters Pion has a ``Settings`` field for are converted
through ``pion.config.PARAMETERS``; the others are stored, normalized, in ``Settings.extra``
(docs/config.md says which of them have no effect in Pion). Value checks live in
``config_values``. Imports nothing from the rest of the server.
"""

from __future__ import annotations

from dataclasses import dataclass

from pion.server.admin import config_values as v
from pion.storage.encodings import DEFAULT_THRESHOLDS

INT_MAX = 2**31 - 1
INT_MIN = -(2**31)
UINT_MAX = 2**32 - 1
LONG_MAX = 2**63 - 1
ULLONG_MAX = 2**64 - 1

# flags, as Redis's *_CONFIG flags
IMMUTABLE = 1
PROTECTED = 2
HIDDEN = 4  # only an exact name finds it in CONFIG GET
SENSITIVE = 8
MULTI_ARG = 16  # the value is split on spaces


@dataclass(frozen=True, slots=True)
class Param:
    name: str
    kind: str  # bool | int | memory | mempercent | octal | enum | string | special
    default: str
    flags: int = 0
    lower: int = 0
    upper: int = 0
    choices: tuple[str, ...] = ()
    alias: str = ""
    #: extra check for string and special kinds: (raw value, current value) -> normalized value
    check: v.Check | None = None


def _bool(name: str, default: bool, flags: int = 0, alias: str = "") -> Param:
    return Param(name, "bool", "yes" if default else "no", flags, alias=alias)


def _int(name: str, default: int, lower: int, upper: int, flags: int = 0, alias: str = "") -> Param:
    return Param(name, "int", str(default), flags, lower, upper, alias=alias)


def _mem(name: str, default: int, lower: int, upper: int, flags: int = 0, alias: str = "") -> Param:
    return Param(name, "memory", str(default), flags, lower, upper, alias=alias)


def _enum(name: str, default: str, choices: str, flags: int = 0) -> Param:
    return Param(name, "enum", default, flags, choices=tuple(choices.split()))


def _str(name: str, default: str = "", flags: int = 0, check: v.Check | None = None, alias: str = "") -> Param:
    return Param(name, "string", default, flags, alias=alias, check=check)


def _special(name: str, default: str, check: v.Check, flags: int = 0, alias: str = "") -> Param:
    return Param(name, "special", default, flags, alias=alias, check=check)


_T = DEFAULT_THRESHOLDS
_BOOLS = [
    _bool("rdbchecksum", True, IMMUTABLE), _bool("daemonize", False, IMMUTABLE),
    _bool("io-threads-do-reads", False, IMMUTABLE), _bool("always-show-logo", False, IMMUTABLE),
    _bool("protected-mode", True), _bool("rdbcompression", True), _bool("rdb-del-sync-files", False),
    _bool("activerehashing", True), _bool("stop-writes-on-bgsave-error", True),
    _bool("set-proc-title", True, IMMUTABLE), _bool("dynamic-hz", True),
    _bool("lazyfree-lazy-eviction", False), _bool("lazyfree-lazy-expire", False),
    _bool("lazyfree-lazy-server-del", False), _bool("lazyfree-lazy-user-del", False),
    _bool("lazyfree-lazy-user-flush", False), _bool("repl-disable-tcp-nodelay", False),
    _bool("repl-diskless-sync", True), _bool("aof-rewrite-incremental-fsync", True),
    _bool("no-appendfsync-on-rewrite", False), _bool("cluster-require-full-coverage", True),
    _bool("rdb-save-incremental-fsync", True), _bool("aof-load-truncated", True),
    _bool("aof-use-rdb-preamble", True), _bool("aof-timestamp-enabled", False),
    _bool("cluster-replica-no-failover", False, alias="cluster-slave-no-failover"),
    _bool("replica-lazy-flush", False, alias="slave-lazy-flush"),
    _bool("replica-serve-stale-data", True, alias="slave-serve-stale-data"),
    _bool("replica-read-only", True, alias="slave-read-only"),
    _bool("replica-ignore-maxmemory", True, alias="slave-ignore-maxmemory"),
    _bool("jemalloc-bg-thread", True), _bool("syslog-enabled", False, IMMUTABLE),
    _bool("cluster-enabled", False, IMMUTABLE), _bool("appendonly", True),
    _bool("cluster-allow-reads-when-down", False), _bool("cluster-allow-pubsubshard-when-down", True),
    _bool("crash-log-enabled", True), _bool("crash-memcheck-enabled", True),
    _bool("use-exit-on-panic", False, HIDDEN), _bool("disable-thp", True, IMMUTABLE),
    _bool("cluster-allow-replica-migration", True), _bool("replica-announced", True),
    _bool("latency-tracking", True), _bool("aof-disable-auto-gc", False),
    _bool("cluster-slot-stats-enabled", False),
    _bool("replica-ignore-disk-write-errors", False),
    Param("activedefrag", "bool", "no", check=v.check_activedefrag),
]
_STRINGS = [
    _str("aclfile", flags=IMMUTABLE), _str("unixsocket", flags=IMMUTABLE), _str("pidfile", flags=IMMUTABLE),
    _str("replica-announce-ip", alias="slave-announce-ip"), _str("masteruser", flags=SENSITIVE),
    _str("cluster-announce-ip"), _str("cluster-config-file", "nodes.conf", IMMUTABLE),
    _str("cluster-announce-hostname", check=v.check_hostname),
    _str("cluster-announce-human-nodename", check=v.check_hostname),
    _str("syslog-ident", "redis", IMMUTABLE),
    _str("dbfilename", "dump.rdb", PROTECTED, check=v.check_dbfilename),
    _str("appendfilename", "appendonly.aof", IMMUTABLE), _str("appenddirname", "appendonlydir", IMMUTABLE),
    _str("server_cpulist", flags=IMMUTABLE), _str("bio_cpulist", flags=IMMUTABLE),
    _str("aof_rewrite_cpulist", flags=IMMUTABLE), _str("bgsave_cpulist", flags=IMMUTABLE),
    _str("ignore-warnings"), _str("proc-title-template", "{title} {listen-addr} {server-mode}", check=v.check_title),
    _str("bind-source-addr"), _str("logfile", flags=IMMUTABLE), _str("locale-collate"),
    _str("masterauth", flags=SENSITIVE), _str("requirepass", flags=SENSITIVE),
]
_ENUMS = [
    _enum("supervised", "no", "upstart systemd auto no", IMMUTABLE),
    _enum("syslog-facility", "local0", "user local0 local1 local2 local3 local4 local5 local6 local7", IMMUTABLE),
    _enum("repl-diskless-load", "disabled", "disabled on-empty-db swapdb"),
    _enum("loglevel", "notice", "debug verbose notice warning nothing"),
    _enum("maxmemory-policy", "noeviction", "volatile-lru volatile-lfu volatile-random volatile-ttl "
          "allkeys-lru allkeys-lfu allkeys-random noeviction"),
    _enum("appendfsync", "always", "everysec always no"),
    _enum("oom-score-adj", "no", "no yes relative absolute"),
    _enum("acl-pubsub-default", "resetchannels", "allchannels resetchannels"),
    _enum("sanitize-dump-payload", "no", "no yes clients"),
    _enum("enable-protected-configs", "no", "no yes local", IMMUTABLE),
    _enum("enable-debug-command", "no", "no yes local", IMMUTABLE),
    _enum("enable-module-command", "no", "no yes local", IMMUTABLE),
    _enum("cluster-preferred-endpoint-type", "ip", "ip hostname unknown-endpoint"),
    _enum("propagation-error-behavior", "ignore", "ignore panic panic-on-replicas"),
    _enum("shutdown-on-sigint", "default", "default save nosave now force"),
    _enum("shutdown-on-sigterm", "default", "default save nosave now force"),
]
_INTS = [
    _int("databases", 16, 1, INT_MAX, IMMUTABLE), _int("port", 1974, 0, 65535),
    _int("io-threads", 1, 1, 128, IMMUTABLE), _int("auto-aof-rewrite-percentage", 100, 0, INT_MAX),
    _int("cluster-replica-validity-factor", 10, 0, INT_MAX, alias="cluster-slave-validity-factor"),
    _int("list-max-listpack-size", _T["list-max-listpack-size"], INT_MIN, INT_MAX, alias="list-max-ziplist-size"),
    _int("tcp-keepalive", 300, 0, INT_MAX), _int("cluster-migration-barrier", 1, 0, INT_MAX),
    _int("active-defrag-cycle-min", 1, 1, 99), _int("active-defrag-cycle-max", 25, 1, 99),
    _int("active-defrag-threshold-lower", 10, 0, 1000), _int("active-defrag-threshold-upper", 100, 0, 1000),
    _int("lfu-log-factor", 10, 0, INT_MAX), _int("lfu-decay-time", 1, 0, INT_MAX),
    _int("replica-priority", 100, 0, INT_MAX, alias="slave-priority"),
    _int("repl-diskless-sync-delay", 5, 0, INT_MAX), _int("maxmemory-samples", 5, 1, INT_MAX),
    _int("maxmemory-eviction-tenacity", 10, 0, 100), _int("timeout", 0, 0, INT_MAX),
    _int("replica-announce-port", 0, 0, 65535, alias="slave-announce-port"),
    _int("tcp-backlog", 511, 0, INT_MAX, IMMUTABLE), _int("cluster-port", 0, 0, 65535, IMMUTABLE),
    _int("cluster-announce-bus-port", 0, 0, 65535), _int("cluster-announce-port", 0, 0, 65535),
    _int("cluster-announce-tls-port", 0, 0, 65535), _int("repl-timeout", 60, 1, INT_MAX),
    _int("repl-ping-replica-period", 10, 1, INT_MAX, alias="repl-ping-slave-period"),
    _int("list-compress-depth", 0, 0, INT_MAX), _int("rdb-key-save-delay", 0, INT_MIN, INT_MAX, HIDDEN),
    _int("key-load-delay", 0, INT_MIN, INT_MAX, HIDDEN), _int("active-expire-effort", 1, 1, 10),
    _int("hz", 10, 0, INT_MAX), _int("min-replicas-to-write", 0, 0, INT_MAX, alias="min-slaves-to-write"),
    _int("min-replicas-max-lag", 10, 0, INT_MAX, alias="min-slaves-max-lag"),
    _int("watchdog-period", 0, 0, INT_MAX, HIDDEN), _int("shutdown-timeout", 10, 0, INT_MAX),
    _int("repl-diskless-sync-max-replicas", 0, 0, INT_MAX), _int("maxclients", 10000, 1, UINT_MAX),
    Param("unixsocketperm", "octal", "0", IMMUTABLE, 0, 0o777), _int("socket-mark-id", 0, 0, UINT_MAX),
    _int("active-defrag-max-scan-fields", 1000, 1, LONG_MAX), _int("slowlog-max-len", 128, 0, LONG_MAX),
    _int("acllog-max-len", 128, 0, LONG_MAX),
    _int("busy-reply-threshold", 5000, 0, LONG_MAX, alias="lua-time-limit"),
    _int("cluster-node-timeout", 15000, 0, LONG_MAX), _int("slowlog-log-slower-than", 10000, -1, LONG_MAX),
    _int("latency-monitor-threshold", 0, 0, LONG_MAX), _int("stream-node-max-entries", 100, 0, LONG_MAX),
    _int("hash-max-listpack-entries", _T["hash-max-listpack-entries"], 0, LONG_MAX, alias="hash-max-ziplist-entries"),
    _int("set-max-intset-entries", _T["set-max-intset-entries"], 0, LONG_MAX),
    _int("set-max-listpack-entries", _T["set-max-listpack-entries"], 0, LONG_MAX),
    _int("zset-max-listpack-entries", _T["zset-max-listpack-entries"], 0, LONG_MAX, alias="zset-max-ziplist-entries"),
    _int("tracking-table-max-keys", 1000000, 0, LONG_MAX), _int("repl-backlog-ttl", 3600, 0, LONG_MAX),
    _int("loading-process-events-interval-bytes", 2 * 1024 * 1024, 1024, INT_MAX, HIDDEN),
    Param("tls-port", "int", "0", 0, 0, 65535, check=v.check_tls_port), _int("tls-session-cache-size", 20 * 1024, 0, INT_MAX),
    _int("tls-session-cache-timeout", 300, 0, INT_MAX),
]
_MEMORY = [
    _mem("proto-max-bulk-len", 512 * 1024 * 1024, 1024 * 1024, LONG_MAX),
    _mem("repl-backlog-size", 1024 * 1024, 1, LONG_MAX), _mem("maxmemory", 0, 0, ULLONG_MAX),
    _mem("cluster-link-sendbuf-limit", 0, 0, ULLONG_MAX),
    _mem("active-defrag-ignore-bytes", 100 << 20, 1, LONG_MAX),
    _mem("hash-max-listpack-value", _T["hash-max-listpack-value"], 0, LONG_MAX, alias="hash-max-ziplist-value"),
    _mem("set-max-listpack-value", _T["set-max-listpack-value"], 0, LONG_MAX),
    _mem("stream-node-max-bytes", 4096, 0, LONG_MAX),
    _mem("zset-max-listpack-value", _T["zset-max-listpack-value"], 0, LONG_MAX, alias="zset-max-ziplist-value"),
    _mem("hll-sparse-max-bytes", 3000, 0, LONG_MAX),
    _mem("client-query-buffer-limit", 1024 * 1024 * 1024, 1024 * 1024, LONG_MAX),
    Param("maxmemory-clients", "mempercent", "0", 0, -100, LONG_MAX, check=v.check_maxmemory_clients),
    _mem("auto-aof-rewrite-min-size", 64 * 1024 * 1024, 0, LONG_MAX),
]
_TLS = [_bool("tls-cluster", False), _bool("tls-replication", False),
        _enum("tls-auth-clients", "yes", "no yes optional"), _bool("tls-prefer-server-ciphers", False),
        _bool("tls-session-caching", True)] + [
    _str(name) for name in (
        "tls-cert-file", "tls-key-file", "tls-key-file-pass", "tls-client-cert-file", "tls-client-key-file",
        "tls-client-key-file-pass", "tls-dh-params-file", "tls-ca-cert-file", "tls-ca-cert-dir",
        "tls-protocols", "tls-ciphers", "tls-ciphersuites")]
#: Pion's breadcrumbs (pion.server.durability.status): read at start, so CONFIG SET refuses them
_PION_IMMUTABLE = [_str("crash-log", flags=IMMUTABLE), _str("status-file", flags=IMMUTABLE),
                   _bool("breadcrumbs", True, IMMUTABLE), _int("rss-warn-pct", 70, 1, INT_MAX, IMMUTABLE),
                   _int("metrics-port", 0, 0, 65535, IMMUTABLE), _str("metrics-bind", "127.0.0.1", IMMUTABLE),
                   _int("dashboard-port", 0, 0, 65535, IMMUTABLE), _str("dashboard-bind", "127.0.0.1", IMMUTABLE)]
_SPECIAL = [
    _special("dir", ".", v.check_dir, PROTECTED),
    _special("save", "3600 1 300 100 60 10000", v.check_save, MULTI_ARG),
    _special("client-output-buffer-limit", v.OBUF_DEFAULT, v.check_obuf, MULTI_ARG),
    _special("oom-score-adj-values", "0 200 800", v.check_oom_values, MULTI_ARG),
    _special("notify-keyspace-events", "", v.check_notify),
    _special("bind", "127.0.0.1", v.check_bind, MULTI_ARG),
    _special("replicaof", "", v.check_replicaof, IMMUTABLE | MULTI_ARG, alias="slaveof"),
    _special("latency-tracking-info-percentiles", "50 99 99.9", v.check_percentiles, MULTI_ARG),
]

PARAMS: dict[str, Param] = {}
#: lower-case name or alias -> the parameter
LOOKUP: dict[str, Param] = {}
#: Pion's own start-up parameters: CONFIG SET accepts their current value (a no-op), refuses others
PION_IMMUTABLE = frozenset(param.name for param in _PION_IMMUTABLE)

for _param in _BOOLS + _STRINGS + _ENUMS + _INTS + _MEMORY + _TLS + _SPECIAL + _PION_IMMUTABLE:
    PARAMS[_param.name] = _param
    LOOKUP[_param.name] = _param
    if _param.alias:
        LOOKUP[_param.alias] = _param


def normalize(param: Param, raw: str, current: str) -> str:
    """The value as CONFIG GET shows it after ``CONFIG SET param raw``; raises ConfigError with Redis's text."""
    kind = param.kind
    if kind == "bool":
        value = v.parse_yes_no(raw)
    elif kind in ("int", "memory", "mempercent", "octal"):
        value = v.parse_number(kind, raw, param.lower, param.upper)
    elif kind == "enum":
        value = v.parse_enum(raw, param.choices)
    else:
        value = raw
    if param.check is not None:
        value = param.check(value, current)
    return value
