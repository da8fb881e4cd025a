"""Command families, one module each. ``FAMILIES`` lists them; ``load_table`` builds the table.

Add a family by creating its module here and naming it in ``FAMILIES``.
"""

from __future__ import annotations

import importlib

from pion.server.registry import CommandTable, collect_specs

FAMILIES = (
    "control.connection",
    "core.strings",
    "core.string_counters",
    "core.string_ranges",
    "core.string_compare",
    "core.bitmaps",
    "core.bitfield",
    "core.keys",
    "core.expiry",
    "core.objects",
    "core.migrate",
    "core.sort",
    "core.databases",
    "control.server_admin",
    "control.server_debug",
    "control.client",
    "control.tracking",
    "control.config",
    "control.introspection",
    "core.transactions",
    "core.pubsub",
    "core.hashes",
    "core.lists",
    "core.sets",
    "core.zsets",
    "core.zset_ranges",
    "core.zset_ops",
    "core.blocking_pops",
    "core.hyperloglog",
    "core.geo",
    "core.streams",
    "core.stream_groups",
    "core.stream_claims",
    "core.stream_deletes",
    "control.persistence",
    "kv.vstore",
    "kv.fetch",
    "kv.export",
    "kv.prefix",
    "kv.stage",
    "kv.artifact",
    "kv.migrate",
    "kv.substrates",
    "moe.experts",
    "attention.prefix",
    "attention.store",
    "attention.sparse",
    "scripting.eval",
    "scripting.functions",
    "control.acl",
    "cluster.commands",
    "replication.commands",
    "vsets.commands",
    "vsets.read",
    "json.commands",
    "json.containers",
    "search.admin",
    "search.query",
    "search.aggregate",
    "search.hybrid",
    "search.misc",
    "search.suggest",
    "search.config",
    "ai.embed",
    "ai.cache",
    "ai.memory",
    "search.embed",
)


def load_table() -> CommandTable:
    modules = [importlib.import_module(f"{__name__}.{name}") for name in FAMILIES]
    return CommandTable(collect_specs(modules))
