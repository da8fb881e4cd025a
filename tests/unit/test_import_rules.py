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
