"""The docs are self-contained: every relative link resolves inside the repository, no page
names a path outside it, and docs/README.md indexes every page (issue 32)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
PAGES = sorted(DOCS.rglob("*.md")) + [ROOT / "README.md"]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _relative_links(page: Path) -> list[str]:
    return [t for t in LINK.findall(page.read_text()) if not re.match(r"[a-z]+:", t) and not t.startswith("#")]


def test_relative_links_resolve_inside_the_repository():
    bad = []
    for page in PAGES:
        for target in _relative_links(page):
            path = (page.parent / target.split("#")[0]).resolve()
            if not path.is_relative_to(ROOT) or not path.exists():
                bad.append(f"{page.relative_to(ROOT)}: {target}")
    assert bad == []


def test_no_page_names_a_path_outside_the_repository():
    outside = re.compile(r"\.\./shared|/work/|DESIGN\.md")
    bad = [
        f"{p.relative_to(ROOT)}:{i}"
        for p in PAGES
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if outside.search(line)
    ]
    assert bad == []


def test_the_index_lists_every_page():
    listed = {(DOCS / t).resolve() for t in _relative_links(DOCS / "README.md")}
    missing = [
        str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md") if p.name != "README.md" and p.resolve() not in listed
    ]
    assert missing == []
