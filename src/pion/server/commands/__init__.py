"""Command families, one module each. ``FAMILIES`` lists them; ``load_table`` builds the table.

Add a family by creating its module here and naming it in ``FAMILIES``.
"""

from __future__ import annotations

import importlib

from pion.server.registry import CommandTable, collect_specs

FAMILIES = (
    "connection",
    "strings",
    "string_counters",
    "string_ranges",
    "string_compare",
    "bitmaps",
    "bitfield",
    "keys",
    "expiry",
    "objects",
    "migrate",
    "sort",
    "databases",
    "server_admin",
    "server_debug",
    "client_cmds",
    "tracking_cmds",
    "config_cmds",
    "introspection",
    "transactions",
    "pubsub",
    "hashes",
    "lists",
    "sets",
    "zsets",
    "zset_ranges",
    "zset_ops",
    "blocking_pops",
    "hyperloglog",
    "geo",
    "streams",
    "stream_groups",
    "stream_claims",
    "stream_deletes",
    "persistence",
    "kv_vstore",
    "kv_fetch",
    "kv_export",
    "kv_prefix",
    "kv_stage",
    "kv_artifact",
    "kv_migrate",
    "kv_substrates",
    "moe_experts",
    "attend_prefix",
    "attend_store",
    "attend_sparse",
    "scripting",
    "functions_cmds",
    "acl",
    "cluster",
    "replication",
    "vsets",
    "vsets_read",
    "json_cmds",
    "json_containers",
    "search_admin",
    "search_query",
    "search_aggregate",
    "search_hybrid",
    "search_misc",
    "search_suggest",
    "search_config",
    "ai_embed",
    "ai_cache",
    "ai_memory",
    "search_embed",
)


def load_table() -> CommandTable:
    modules = [importlib.import_module(f"{__name__}.{name}") for name in FAMILIES]
    return CommandTable(collect_specs(modules))
