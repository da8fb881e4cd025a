"""Typed, frozen server settings, validated once.

``cli`` builds a ``Settings`` from flags and a redis.conf-style file; the server keeps the live
instance in ``server.settings`` and CONFIG SET swaps in a validated copy made with
``dataclasses.replace``, so every component always reads a consistent, checked value.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace

FSYNC_POLICIES = ("always", "everysec", "no")
MAXMEMORY_POLICIES = (
    "noeviction", "allkeys-lru", "volatile-lru", "allkeys-lfu", "volatile-lfu",
    "allkeys-random", "volatile-random", "volatile-ttl",
)
LOGLEVELS = ("debug", "verbose", "notice", "warning", "nothing")
EMBED_PROVIDERS = ("minilm", "all-minilm-l6-v2", "sentence-transformers", "st", "openai", "hash", "none")


@dataclass(frozen=True, slots=True)
class Settings:
    # network
    port: int = 1974
    bind: tuple[str, ...] = ("127.0.0.1",)
    unixsocket: str = ""
    unixsocketperm: int = 0
    protected_mode: bool = True
    maxclients: int = 10000
    timeout: int = 0
    tcp_keepalive: int = 300
    # logging
    loglevel: str = "notice"
    logfile: str = ""
    # data
    dir: str = "."
    databases: int = 16
    # protocol limits
    proto_max_bulk_len: int = 512 * 1024 * 1024
    client_query_buffer_limit: int = 1024 * 1024 * 1024
    # auth, tenants and TLS (SECURITY.md)
    requirepass: str = ""
    #: ``NAME:PASSWORD[:quota=1gb]`` specs, one per --tenant (repeatable), never shown by CONFIG
    tenants: tuple[str, ...] = ()
    tenants_file: str = ""
    #: redis.conf ``user <name> <rules>`` lines (repeatable), applied at start (ACLLoadConfiguredUsers)
    users: tuple[str, ...] = ()
    tls_port: int = 0
    tls_cert_file: str = ""
    tls_key_file: str = ""
    tls_key_file_pass: str = ""
    tls_ca_cert_file: str = ""
    tls_ca_cert_dir: str = ""
    tls_auth_clients: str = "yes"  # yes | no | optional
    tls_protocols: str = ""
    tls_ciphers: str = ""
    tls_ciphersuites: str = ""
    # persistence
    appendonly: bool = True
    appendfsync: str = "always"
    wal_segment_size: int = 64 * 1024 * 1024
    blob_threshold: int = 1024 * 1024
    save: str = "3600 1 300 100 60 10000"
    auto_aof_rewrite_percentage: int = 100
    auto_aof_rewrite_min_size: int = 64 * 1024 * 1024
    # memory
    maxmemory: int = 0
    maxmemory_policy: str = "noeviction"
    maxmemory_samples: int = 5
    # K/V cache: byte budget of stored rows and SSM blobs, 0 = none (evicts whole prefixes, LRU, leaves first)
    kv_maxmemory: int = 0
    # V.EXPORT: byte budget of the export files (under <dir>/export), 0 = V.EXPORT disabled
    kv_export_maxbytes: int = 4 * 1024**3
    # MoE expert tier (docs/moe.md): the directory models are loaded from ("" = tier off), and
    # the byte budget of resident expert copies in MiB (0 = serve every fetch from the shards)
    moe_cache: str = ""
    moe_cache_mib: int = 1024
    # embeddings (docs/embeddings.md): minilm (packaged all-MiniLM-L6-v2) | sentence-transformers:PATH |
    # openai (embed-url, embed-model, embed-api-key) | hash[:DIM] (tests, not semantic) | none
    embed_provider: str = "minilm"
    embed_url: str = ""
    embed_model: str = ""
    #: from --embed-api-key-file or PION_EMBED_API_KEY; never shown by CONFIG GET
    embed_api_key: str = ""
    embed_dim: int = 0
    embed_batch_size: int = 64
    #: the model's CPU threads in its worker process; 0 = half the cores (at least 1)
    embed_threads: int = 0
    embed_timeout: int = 60
    embed_preload: bool = False
    #: AI.SEMANTIC_CACHE GET hits when cosine similarity >= this (docs/embeddings.md has the measurement)
    semantic_cache_threshold: float = 0.85
    #: the check after the vector match (pion.semantic.verify): off | lexical | model
    semantic_cache_verify: str = "lexical"
    # Stage 2 (ATTEND.PREFIX.*): bytes of decoded prefixes and block summaries kept warm (0 = no cap)
    attention_warm_bytes: int = 1024**3
    # Stage 2: attend only the last N prefix tokens when a query does not say (0 = the whole prefix)
    attention_fa_window: int = 0
    # breadcrumbs (pion.server.durability.status): paths default to the data directory; breadcrumbs off: neither
    crash_log: str = ""
    status_file: str = ""
    breadcrumbs: bool = True
    #: one warning when RSS passes this share of the machine's memory (over 100: never)
    rss_warn_pct: int = 70
    # Prometheus metrics (docs/metrics.md): the HTTP port of /metrics (0 = off) and its address
    metrics_port: int = 0
    metrics_bind: str = "127.0.0.1"
    # the dashboard page (docs/dashboard.md): its HTTP port (0 = off) and address (not loopback: a password is needed)
    dashboard_port: int = 0
    dashboard_bind: str = "127.0.0.1"
    # misc
    enable_debug_command: str = "no"  # no | yes | local (DEBUG only from a local connection)
    notify_keyspace_events: str = ""
    slowlog_log_slower_than: int = 10000
    slowlog_max_len: int = 128
    hz: int = 10
    #: the config file the server was started with (CONFIG REWRITE rewrites it), "" for none
    config_file: str = ""
    # Redis's parameters that Pion acts on (REDIS_TYPED: checked by the config table at start too)
    #: LATENCY HISTOGRAM and INFO latencystats record every command (pion.server.admin.latency)
    latency_tracking: bool = True
    #: ms at which a command or an expire pass is a LATENCY event (0: monitoring off)
    latency_monitor_threshold: int = 0
    #: the percentiles INFO latencystats prints
    latency_tracking_info_percentiles: tuple[float, ...] = (50.0, 99.0, 99.9)
    #: ms a script may run before other clients get -BUSY (alias lua-time-limit; 0: never)
    busy_reply_threshold: int = 5000
    #: refuse writes (-MISCONF) while the last background save failed
    stop_writes_on_bgsave_error: bool = True
    # replication (docs/replication.md): "host port" of the primary to follow ("" = a primary)
    replicaof: str = ""
    masterauth: str = ""
    masteruser: str = ""
    replica_read_only: bool = True
    replica_priority: int = 100
    repl_backlog_size: int = 1024 * 1024
    repl_ping_replica_period: int = 10
    repl_timeout: int = 60
    #: refuse writes (-NOREPLICAS) while fewer replicas than this acknowledged within
    #: min-replicas-max-lag seconds (either 0: no check); aliases min-slaves-*
    min_replicas_to_write: int = 0
    min_replicas_max_lag: int = 10
    # cluster mode (docs/scale-out.md)
    cluster_enabled: bool = False
    cluster_config_file: str = "nodes.conf"
    cluster_announce_ip: str = ""
    cluster_announce_port: int = 0
    cluster_require_full_coverage: bool = True
    #: CLUSTER SLOT-STATS counts each slot's cpu-usec and network bytes (Redis 8.2+; off by
    #: default: the counting costs every command a little)
    cluster_slot_stats_enabled: bool = False
    #: the ACL LOG's length; the keys CLIENT TRACKING remembers (0: no limit); a stream node's entries
    acllog_max_len: int = 128
    tracking_table_max_keys: int = 1000000
    stream_node_max_entries: int = 100
    #: the ACL users file (ACL SAVE/LOAD and the users at start; relative to ``dir``; "" = none)
    aclfile: str = ""
    #: the channels of users made after it: "allchannels" gives them ``&*``, "resetchannels" none
    acl_pubsub_default: str = "resetchannels"
    #: bytes of each K/V arena file (set in code only: no flag or CONFIG name exposes it)
    arena_file_size: int = 256 * 1024 * 1024
    #: client-output-buffer-limit: (class, hard bytes, soft bytes, soft seconds) per client class
    client_output_buffer_limit: tuple[tuple[str, int, int, int], ...] = (
        ("normal", 0, 0, 0), ("slave", 256 * 1024**2, 64 * 1024**2, 60), ("pubsub", 32 * 1024**2, 8 * 1024**2, 60))
    #: every other Redis parameter: accepted, checked and stored (CONFIG GET shows it, CONFIG
    #: REWRITE writes it), "name" -> normalized value. Pion does not act on these (docs/config.md
    #: says "no effect"), except the encoding sizes (listpack, intset, hll-sparse-max-bytes),
    #: read from here by ``storage.encodings`` under their names and old aliases: they shape only
    #: what OBJECT ENCODING reports, never how a value is stored
    extra: tuple[tuple[str, str], ...] = field(default=())

    def __post_init__(self) -> None:
        _check(0 <= self.port <= 65535, f"port must be 0..65535, got {self.port}")
        _check(self.databases >= 1, "databases must be at least 1")
        _check(self.maxclients >= 1, "maxclients must be at least 1")
        _check(self.timeout >= 0, "timeout must be >= 0")
        _check(self.appendfsync in FSYNC_POLICIES, f"appendfsync must be one of {', '.join(FSYNC_POLICIES)}")
        _check(
            self.maxmemory_policy in MAXMEMORY_POLICIES,
            f"maxmemory-policy must be one of {', '.join(MAXMEMORY_POLICIES)}",
        )
        _check(self.loglevel in LOGLEVELS, f"loglevel must be one of {', '.join(LOGLEVELS)}")
        _check(self.maxmemory >= 0, "maxmemory must be >= 0")
        _check(self.kv_maxmemory >= 0, "kv-maxmemory must be >= 0")
        _check(self.kv_export_maxbytes >= 0, "kv-export-maxbytes must be >= 0")
        _check(0 <= self.moe_cache_mib <= 1 << 30, "moe-cache-mib must be 0..1073741824")
        _check(self.embed_provider.partition(":")[0].lower() in EMBED_PROVIDERS,
               "embed-provider must be minilm, sentence-transformers:PATH, openai, hash[:DIM] or none")
        _check(0 <= self.embed_dim <= 32768, "embed-dim must be 0..32768")
        _check(1 <= self.embed_batch_size <= 4096, "embed-batch-size must be 1..4096")
        _check(0 <= self.embed_threads <= 256, "embed-threads must be 0..256")
        _check(1 <= self.embed_timeout <= 3600, "embed-timeout must be 1..3600 seconds")
        _check(-1.0 <= self.semantic_cache_threshold <= 1.0, "semantic-cache-threshold must be a cosine similarity in -1..1")
        _check(self.semantic_cache_verify in ("off", "lexical", "model"),
               "semantic-cache-verify must be off, lexical or model")
        _check(self.attention_warm_bytes >= 0, "attention-warm-bytes must be >= 0")
        _check(self.attention_fa_window >= 0, "attention-fa-window must be >= 0")
        _check(self.proto_max_bulk_len >= 1024 * 1024, "proto-max-bulk-len must be at least 1mb")
        _check(0 <= self.tls_port <= 65535, f"tls-port must be 0..65535, got {self.tls_port}")
        _check(0 <= self.metrics_port <= 65535, f"metrics-port must be 0..65535, got {self.metrics_port}")
        _check(bool(self.metrics_bind.strip()), "metrics-bind must be an address")
        _check(0 <= self.dashboard_port <= 65535, f"dashboard-port must be 0..65535, got {self.dashboard_port}")
        _check(bool(self.dashboard_bind.strip()), "dashboard-bind must be an address")
        _check(self.rss_warn_pct >= 1, f"rss-warn-pct must be >= 1, got {self.rss_warn_pct}")
        _check(self.tls_auth_clients in ("yes", "no", "optional"), "tls-auth-clients must be yes, no or optional")

    def with_changes(self, **changes: object) -> Settings:
        """A validated copy (CONFIG SET); raises ValueError on a bad value."""
        return replace(self, **changes)


class ConfigError(ValueError):
    """A setting that does not validate; the message says which and why."""


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise ConfigError(message)


def field_names() -> list[str]:
    return [f.name for f in fields(Settings)]


# -- parameters by their redis.conf / CONFIG names ---------------------------------------------

_UNITS = {
    "": 1, "b": 1, "k": 1000, "kb": 1024, "m": 1000**2, "mb": 1024**2, "g": 1000**3, "gb": 1024**3,
}


def parse_memory(text: str) -> int:
    """Redis's memtoll: ``1gb`` = 1024**3, ``1g`` = 1000**3, plain bytes otherwise."""
    low = text.strip().lower()
    digits = low.rstrip("kmgb")
    unit = low[len(digits):]
    if unit not in _UNITS or not digits.lstrip("-").isdigit():
        raise ConfigError(f"argument must be a memory value, got '{text}'")
    return int(digits) * _UNITS[unit]


def parse_bool(text: str) -> bool:
    low = text.strip().lower()
    if low in ("yes", "true", "1"):
        return True
    if low in ("no", "false", "0"):
        return False
    raise ConfigError(f"argument must be 'yes' or 'no', got '{text}'")


def parse_int_value(text: str) -> int:
    try:
        return int(text.strip())
    except ValueError:
        raise ConfigError(f"argument couldn't be parsed into an integer, got '{text}'") from None


def parse_float_value(text: str) -> float:
    try:
        value = float(text.strip())
    except ValueError:
        raise ConfigError(f"argument couldn't be parsed into a number, got '{text}'") from None
    if value != value:
        raise ConfigError("argument must be a number, got 'nan'")
    return value


def parse_octal(text: str) -> int:
    try:
        return int(text.strip(), 8)
    except ValueError:
        raise ConfigError(f"argument couldn't be parsed into an octal integer, got '{text}'") from None


def format_bool(value: bool) -> str:
    return "yes" if value else "no"


def parse_output_limits(text: str) -> tuple[tuple[str, int, int, int], ...]:
    """``normal 0 0 0 slave ...`` (as the config table normalizes it) -> per-class limits."""
    words = text.split()
    if len(words) % 4:
        raise ConfigError(f"argument must be 'class hard soft seconds' groups, got '{text}'")
    try:
        return tuple((words[j], int(words[j + 1]), int(words[j + 2]), int(words[j + 3]))
                     for j in range(0, len(words), 4))
    except ValueError:
        raise ConfigError(f"argument must be 'class hard soft seconds' groups, got '{text}'") from None


def format_output_limits(limits: tuple[tuple[str, int, int, int], ...]) -> str:
    return " ".join(f"{name} {hard} {soft} {seconds}" for name, hard, soft, seconds in limits)


def parse_float_list(text: str) -> tuple[float, ...]:
    return tuple(parse_float_value(word) for word in text.split())


def format_float_list(values: tuple[float, ...]) -> str:
    """``50 99 99.9``: as Redis prints latency-tracking-info-percentiles."""
    return " ".join(("%f" % value).rstrip("0").rstrip(".") for value in values)


#: name -> (Settings field, parse, format). Parameters not listed here live in ``Settings.extra``.
PARAMETERS: dict[str, tuple[str, object, object]] = {
    "port": ("port", parse_int_value, str),
    "bind": ("bind", lambda t: tuple(t.split()), " ".join),
    "unixsocket": ("unixsocket", str, str),
    "unixsocketperm": ("unixsocketperm", parse_octal, lambda v: "%o" % v if v else "0"),
    "protected-mode": ("protected_mode", parse_bool, format_bool),
    "maxclients": ("maxclients", parse_int_value, str),
    "timeout": ("timeout", parse_int_value, str),
    "tcp-keepalive": ("tcp_keepalive", parse_int_value, str),
    "loglevel": ("loglevel", str.lower, str),
    "logfile": ("logfile", str, str),
    "dir": ("dir", str, str),
    "databases": ("databases", parse_int_value, str),
    "proto-max-bulk-len": ("proto_max_bulk_len", parse_memory, str),
    "client-query-buffer-limit": ("client_query_buffer_limit", parse_memory, str),
    "requirepass": ("requirepass", str, str),
    "tenant": ("tenants", lambda t: (t,), " ".join),  # repeatable: settings_from_pairs appends
    "tenants-file": ("tenants_file", str, str),
    "user": ("users", lambda u: (u,), "\n".join),  # repeatable, like tenant
    "tls-port": ("tls_port", parse_int_value, str),
    "tls-cert-file": ("tls_cert_file", str, str),
    "tls-key-file": ("tls_key_file", str, str),
    "tls-key-file-pass": ("tls_key_file_pass", str, str),
    "tls-ca-cert-file": ("tls_ca_cert_file", str, str),
    "tls-ca-cert-dir": ("tls_ca_cert_dir", str, str),
    "tls-auth-clients": ("tls_auth_clients", str.lower, str),
    "tls-protocols": ("tls_protocols", str, str),
    "tls-ciphers": ("tls_ciphers", str, str),
    "tls-ciphersuites": ("tls_ciphersuites", str, str),
    "appendonly": ("appendonly", parse_bool, format_bool),
    "appendfsync": ("appendfsync", str.lower, str),
    "wal-segment-size": ("wal_segment_size", parse_memory, str),
    "blob-threshold": ("blob_threshold", parse_memory, str),
    "save": ("save", str, str),
    "auto-aof-rewrite-percentage": ("auto_aof_rewrite_percentage", parse_int_value, str),
    "auto-aof-rewrite-min-size": ("auto_aof_rewrite_min_size", parse_memory, str),
    "maxmemory": ("maxmemory", parse_memory, str),
    "maxmemory-policy": ("maxmemory_policy", str.lower, str),
    "maxmemory-samples": ("maxmemory_samples", parse_int_value, str),
    "kv-maxmemory": ("kv_maxmemory", parse_memory, str),
    "kv-export-maxbytes": ("kv_export_maxbytes", parse_memory, str),
    "moe-cache": ("moe_cache", str, str),
    "moe-cache-mib": ("moe_cache_mib", parse_int_value, str),
    "embed-provider": ("embed_provider", str, str),
    "embed-url": ("embed_url", str, str),
    "embed-model": ("embed_model", str, str),
    "embed-api-key": ("embed_api_key", str, str),
    "embed-dim": ("embed_dim", parse_int_value, str),
    "embed-batch-size": ("embed_batch_size", parse_int_value, str),
    "embed-threads": ("embed_threads", parse_int_value, str),
    "embed-timeout": ("embed_timeout", parse_int_value, str),
    "embed-preload": ("embed_preload", parse_bool, format_bool),
    "semantic-cache-threshold": ("semantic_cache_threshold", parse_float_value, repr),
    "semantic-cache-verify": ("semantic_cache_verify", lambda v: str(v).lower(), str),
    "attention-warm-bytes": ("attention_warm_bytes", parse_memory, str),
    "attention-fa-window": ("attention_fa_window", parse_int_value, str),
    "fa-window": ("attention_fa_window", parse_int_value, str),  # the reference's flag name
    "crash-log": ("crash_log", str, str),
    "status-file": ("status_file", str, str),
    "breadcrumbs": ("breadcrumbs", parse_bool, format_bool),
    "rss-warn-pct": ("rss_warn_pct", parse_int_value, str),
    "metrics-port": ("metrics_port", parse_int_value, str),
    "metrics-bind": ("metrics_bind", str, str),
    "dashboard-port": ("dashboard_port", parse_int_value, str),
    "dashboard-bind": ("dashboard_bind", str, str),
    "enable-debug-command": ("enable_debug_command", str.lower, str),
    "notify-keyspace-events": ("notify_keyspace_events", str, str),
    "slowlog-log-slower-than": ("slowlog_log_slower_than", parse_int_value, str),
    "slowlog-max-len": ("slowlog_max_len", parse_int_value, str),
    "hz": ("hz", parse_int_value, str),
    "config-file": ("config_file", str, str),  # set by pion-server from its file argument, not settable
    # Redis's own parameters with a typed field (REDIS_TYPED)
    "latency-tracking": ("latency_tracking", parse_bool, format_bool),
    "latency-monitor-threshold": ("latency_monitor_threshold", parse_int_value, str),
    "latency-tracking-info-percentiles": ("latency_tracking_info_percentiles", parse_float_list, format_float_list),
    "busy-reply-threshold": ("busy_reply_threshold", parse_int_value, str),
    "stop-writes-on-bgsave-error": ("stop_writes_on_bgsave_error", parse_bool, format_bool),
    "replicaof": ("replicaof", str, str),
    "masterauth": ("masterauth", str, str),
    "masteruser": ("masteruser", str, str),
    "replica-read-only": ("replica_read_only", parse_bool, format_bool),
    "replica-priority": ("replica_priority", parse_int_value, str),
    "repl-backlog-size": ("repl_backlog_size", parse_memory, str),
    "repl-ping-replica-period": ("repl_ping_replica_period", parse_int_value, str),
    "repl-timeout": ("repl_timeout", parse_int_value, str),
    "min-replicas-to-write": ("min_replicas_to_write", parse_int_value, str),
    "min-replicas-max-lag": ("min_replicas_max_lag", parse_int_value, str),
    "cluster-enabled": ("cluster_enabled", parse_bool, format_bool),
    "cluster-config-file": ("cluster_config_file", str, str),
    "cluster-announce-ip": ("cluster_announce_ip", str, str),
    "cluster-announce-port": ("cluster_announce_port", parse_int_value, str),
    "cluster-require-full-coverage": ("cluster_require_full_coverage", parse_bool, format_bool),
    "cluster-slot-stats-enabled": ("cluster_slot_stats_enabled", parse_bool, format_bool),
    "acllog-max-len": ("acllog_max_len", parse_int_value, str),
    "tracking-table-max-keys": ("tracking_table_max_keys", parse_int_value, str),
    "stream-node-max-entries": ("stream_node_max_entries", parse_int_value, str),
    "aclfile": ("aclfile", str, str),
    "acl-pubsub-default": ("acl_pubsub_default", str, str),
    "client-output-buffer-limit": ("client_output_buffer_limit", parse_output_limits, format_output_limits),
}

#: Redis's parameters (pion.server.admin.config_table) that moved out of ``Settings.extra`` into a
#: typed field: their values are still checked and normalized by the config table at start, as
#: CONFIG SET checks them, and an alias given at start (``slave-read-only``) sets the same field
REDIS_TYPED = frozenset({
    "latency-tracking", "latency-monitor-threshold", "latency-tracking-info-percentiles", "busy-reply-threshold",
    "stop-writes-on-bgsave-error", "replicaof", "masterauth", "masteruser", "replica-read-only",
    "replica-priority", "repl-backlog-size", "repl-ping-replica-period", "repl-timeout",
    "min-replicas-to-write", "min-replicas-max-lag", "cluster-enabled",
    "cluster-config-file", "cluster-announce-ip", "cluster-announce-port", "cluster-require-full-coverage",
    "cluster-slot-stats-enabled", "acllog-max-len", "tracking-table-max-keys", "stream-node-max-entries", "client-output-buffer-limit",
    "aclfile", "acl-pubsub-default",
})


#: parameters that may be given more than once; each occurrence adds to a tuple
REPEATABLE = frozenset({"tenant", "user"})


def settings_from_pairs(pairs: list[tuple[str, str]], base: Settings | None = None) -> Settings:
    """Apply ``(name, raw value)`` pairs in order (a config file, then flags) onto ``base``."""
    changes: dict[str, object] = {}
    extra = dict((base or Settings()).extra)
    for name, raw in pairs:
        key = name.lower()
        entry = PARAMETERS.get(key)
        if entry is None:
            extra[key] = raw
            continue
        field_name, parse, _ = entry
        try:
            if key in REPEATABLE:  # --tenant a:x --tenant b:y: each adds one
                changes[field_name] = changes.get(field_name, getattr(base or Settings(), field_name)) + parse(raw)
                continue
            changes[field_name] = parse(raw)  # type: ignore[operator]
        except ConfigError as exc:
            raise ConfigError(f"{key}: {exc}") from None
    changes["extra"] = tuple(sorted(extra.items()))
    return (base or Settings()).with_changes(**changes)


def read_config_file(path: str, check=None) -> list[tuple[str, str]]:
    """redis.conf syntax: one ``name value...`` a line, ``#`` comments, quoted values.

    ``check(name, values, "path:line")`` -> ``(name, value)`` checks each directive
    (``pion.cli.flags.check_directive``: pion-server refuses unknown ones); without it the
    values are joined by spaces.
    """
    import shlex

    pairs: list[tuple[str, str]] = []
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            text = line.strip()
            if not text or text.startswith("#"):
                continue
            try:
                words = shlex.split(text)
            except ValueError as exc:
                raise ConfigError(f"{path}:{number}: {exc}") from None
            if check is not None:
                pairs.append(check(words[0], words[1:], f"{path}:{number}"))
                continue
            if len(words) < 2 and words[0].lower() not in ("save", "bind", "requirepass"):
                raise ConfigError(f"{path}:{number}: '{words[0]}' needs a value")
            pairs.append((words[0], " ".join(words[1:])))
    return pairs
