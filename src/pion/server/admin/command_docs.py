"""The supported-command table in Markdown, generated from the live command table so the docs
cannot drift from what the dispatcher really accepts (``pion commands`` prints it)."""

from __future__ import annotations

from collections import defaultdict

from pion.server.admin.command_meta import meta_of
from pion.server.registry import CommandSpec, CommandTable

#: the order groups appear in, Redis's groups first, then Pion's own
GROUP_ORDER = (
    "connection", "server", "generic", "string", "bitmap", "hash", "list", "set", "sorted_set", "geo",
    "hyperloglog", "stream", "pubsub", "transactions", "scripting", "kvcache",
)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").split("\n")[0].strip()


def _row(spec: CommandSpec) -> tuple[str, str, str]:
    """(name, syntax from the handler's docstring, Redis's one-line summary when it has one)."""
    name = spec.full_name.upper().replace("|", " ")
    syntax = _cell(spec.summary or name)
    summary = _cell(meta_of(spec).get("docs", {}).get("summary", "")) or "Pion command"
    return name, syntax, summary


def _rows(spec: CommandSpec) -> list[tuple[str, str, str]]:
    if spec.subcommands:
        return [_row(sub) for sub in sorted(spec.subcommands.values(), key=lambda s: s.name)]
    return [_row(spec)]


def render_markdown(table: CommandTable) -> str:
    groups: dict[str, list[tuple[str, str, str]]] = defaultdict(list)
    for spec in table:
        groups[spec.group].extend(_rows(spec))
    ordered = [g for g in GROUP_ORDER if g in groups] + sorted(g for g in groups if g not in GROUP_ORDER)
    total = sum(len(rows) for rows in groups.values())
    lines = [
        "# Supported commands",
        "",
        f"Generated from Pion's command table by `pion commands` ({total} commands and subcommands).",
        "A command not listed here answers `-ERR unknown command`.",
        "",
    ]
    for group in ordered:
        lines += [f"## {group}", "", "| command | syntax | summary |", "|---|---|---|"]
        lines += [f"| `{name}` | `{syntax}` | {summary} |" for name, syntax, summary in sorted(groups[group])]
        lines.append("")
    return "\n".join(lines)
