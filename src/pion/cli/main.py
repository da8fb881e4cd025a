"""``pion <command>``: the demo and operator tools. Each subcommand lives in its own module."""

from __future__ import annotations

import argparse
import importlib
import sys

#: subcommand -> module under pion.cli with ``add_arguments(parser)`` and ``run(args) -> int``
SUBCOMMANDS = {
    "demo": "demo",
    "commands": "commands",
    "check-wal": "check_wal",
    "mcp": "mcp",
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="pion", description="Pion: a memory engine for LLM inference.")
    subparsers = parser.add_subparsers(dest="command", required=True)
    modules = {}
    for name, module_name in SUBCOMMANDS.items():
        module = importlib.import_module(f"pion.cli.{module_name}")
        sub = subparsers.add_parser(name, help=(module.__doc__ or "").strip().split("\n")[0])
        module.add_arguments(sub)
        modules[name] = module
    args = parser.parse_args(argv)
    return int(modules[args.command].run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
