"""docs/commands.md is generated from the command table and must match it (run `pion commands -o docs/commands.md`)."""

from pathlib import Path

from pion.server.admin.command_docs import render_markdown
from pion.server.commands import load_table

DOC = Path(__file__).resolve().parents[2] / "docs" / "commands.md"


def test_command_doc_is_current():
    assert DOC.read_text(encoding="utf-8") == render_markdown(load_table()), (
        "docs/commands.md is stale: run `.venv/bin/pion commands -o docs/commands.md`"
    )


def test_every_command_has_a_syntax_docstring():
    missing = [spec.full_name for spec in load_table() for spec in ([spec] + list(spec.subcommands.values()))
               if spec.handler is not None and not (spec.handler.__doc__ or "").strip()]
    assert missing == []
