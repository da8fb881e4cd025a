"""The commands folder is grouped by wing (issue 32): every command module lives in a wing package
whose docstring says what it owns, and every family the table loads is one of those modules."""

from __future__ import annotations

import importlib
from pathlib import Path

from pion.server import commands

PKG = Path(commands.__file__).parent


def test_no_command_module_outside_a_wing():
    flat = sorted(p.name for p in PKG.glob("*.py") if p.name != "__init__.py")
    assert flat == [], f"modules outside a wing package: {flat}"


def test_every_wing_says_what_it_owns():
    wings = sorted(p.parent.name for p in PKG.glob("*/__init__.py"))
    assert len(wings) >= 10
    for wing in wings:
        doc = importlib.import_module(f"pion.server.commands.{wing}").__doc__
        assert doc and len(doc.split()) >= 8, f"wing {wing} has no docstring saying what it owns"


def test_families_name_wing_modules_that_exist():
    for family in commands.FAMILIES:
        wing, _, module = family.partition(".")
        assert module, f"family {family!r} is not in a wing"
        assert (PKG / wing / f"{module}.py").is_file(), family
