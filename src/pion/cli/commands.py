"""Print the supported-command table (Markdown), generated from the command table."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--output", "-o", help="write to this file instead of stdout")


def run(args: argparse.Namespace) -> int:
    from pion.server.admin.command_docs import render_markdown
    from pion.server.commands import load_table

    text = render_markdown(load_table())
    if args.output:
        with open(args.output, "w", encoding="utf-8") as handle:
            handle.write(text)
    else:
        print(text)
    return 0
