"""The parsed form of a RediSearch query: a tree of ``Node``s (kinds: and, or, not, opt, fields,
term, phrase, prefix, suffix, infix, wildcard, fuzzy, tag, numeric, geo, vrange, missing, all,
none) and, for a vector query, its ``KnnClause``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pion.vector.query_knn import KnnClause


@dataclass
class Node:
    kind: str
    value: Any = None
    children: list[Node] = field(default_factory=list)
    fields: list[str] | None = None  # TEXT restriction (@a|b:...)
    attrs: dict[str, Any] = field(default_factory=dict)


@dataclass
class Query:
    root: Node
    knn: KnnClause | None = None
    text: str = ""
