"""The import rules of docs/architecture.md: no import cycle anywhere in ``pion``, imports placed
inside functions included (``tools/import_cycles.py``; import-linter checks the layers)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _tool():
    spec = importlib.util.spec_from_file_location("import_cycles", ROOT / "tools" / "import_cycles.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _package(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = tmp_path / "pkg" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


def test_pion_has_no_import_cycle():
    tool = _tool()
    graph = tool.import_graph(ROOT / "src", "pion")
    assert len(graph) > 200  # the whole package was read
    cycles = tool.strongly_connected(graph)
    assert cycles == [], "\n".join(" -> ".join(tool.a_cycle(graph, c)) for c in cycles)


def test_a_function_level_import_closes_a_cycle(tmp_path):
    tool = _tool()
    src = _package(tmp_path, {
        "__init__.py": "",
        "a.py": "from pkg import b\n",
        "b.py": "def f():\n    from pkg.a import thing\n",
        "c.py": "from . import a\n",
    })
    graph = tool.import_graph(src, "pkg")
    assert graph["pkg.b"] == {"pkg.a"} and graph["pkg.c"] == {"pkg.a"}
    cycles = tool.strongly_connected(graph)
    assert cycles == [["pkg.a", "pkg.b"]]
    assert tool.a_cycle(graph, cycles[0]) == ["pkg.a", "pkg.b", "pkg.a"]
    assert tool.main(["import_cycles", str(src), "pkg"]) == 1


def test_type_checking_imports_do_not_count(tmp_path):
    tool = _tool()
    src = _package(tmp_path, {
        "__init__.py": "",
        "a.py": "from pkg import b\n",
        "b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.a import A\nelse:\n    import os\n",
    })
    assert tool.strongly_connected(tool.import_graph(src, "pkg")) == []
    assert tool.main(["import_cycles", str(src), "pkg"]) == 0


#: the server's wings, top to bottom (docs/architecture.md "Why this cut"): one imports only those after it
WINGS = ["security", "durability", "admin", "net"]
#: the server's core modules: they import no wing and nothing that imports the wings
CORE = {"_cython_shim", "admission", "args", "blocking", "component", "context", "deferred", "dispatch", "errors", "fastlane", "parts",
        "pause", "pubsub", "redaction", "registry", "search_pool", "tracking"}
#: what sits above the wings (imports them): a core module must not reach these either
ABOVE = {"app", "assembly", "run", "metrics", "dashboard", "commands", "scripting", "cluster", "replication"}


def _server_part(module: str) -> str | None:
    parts = module.split(".")
    return parts[2] if parts[:2] == ["pion", "server"] and len(parts) > 2 else None


def wing_order_violations(graph: dict[str, set[str]]) -> list[str]:
    """Every run-time import that climbs the wings' order, or leaves the core upwards."""
    found = []
    for module, targets in sorted(graph.items()):
        here = _server_part(module)
        for target in sorted(targets):
            there = _server_part(target)
            if here == there or there is None:
                continue
            if here in WINGS and there in WINGS and WINGS.index(there) < WINGS.index(here):
                found.append(f"{module} -> {target}")
            elif here in CORE and (there in WINGS or there in ABOVE):
                found.append(f"{module} -> {target}")
    return found


def test_the_server_wings_stack_in_order():
    graph = _tool().import_graph(ROOT / "src", "pion")
    present = {_server_part(module) for module in graph}
    assert set(WINGS) | CORE | ABOVE <= present  # every name above is a real module or package
    for wing in WINGS:  # each wing is a folder of modules
        assert sum(module.startswith(f"pion.server.{wing}.") for module in graph) >= 5, wing
    assert wing_order_violations(graph) == []


def test_a_climbing_import_is_a_violation():
    graph = {"pion.server.net.tls": {"pion.server.security.auth"},
             "pion.server.dispatch": {"pion.server.admin.info"},
             "pion.server.security.auth": {"pion.server.net.client_info", "pion.server.dispatch"}}
    assert wing_order_violations(graph) == ["pion.server.dispatch -> pion.server.admin.info",
                                            "pion.server.net.tls -> pion.server.security.auth"]
