"""Command families, one module each. ``FAMILIES`` lists them; ``load_table`` builds the table.

Add a family by creating its module here and naming it in ``FAMILIES``.
"""

from __future__ import annotations

import importlib

from pion.server.registry import CommandTable, collect_specs

FAMILIES = (
    "connection",
    "strings",
    "bitmaps",
    "keys",
    "server_admin",
    "client_cmds",
    "config_cmds",
    "introspection",
    "transactions",
    "pubsub",
    "hashes",
    "lists",
    "sets",
    "zsets",
    "hyperloglog",
    "geo",
    "streams",
    "persistence",
    "kvcache",
    "scripting",
    "acl",
)


def load_table() -> CommandTable:
    modules = [importlib.import_module(f"{__name__}.{name}") for name in FAMILIES]
    return CommandTable(collect_specs(modules))
