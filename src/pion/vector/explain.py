"""FT.EXPLAIN / FT.EXPLAINCLI: the query tree as RediSearch prints it after its query expansion.

RediSearch explains the tree its executor will run, not the text typed: stop-words are gone (an
intersection left with one child is that child, nothing left is ``<empty>``), and every word that
is expanded becomes a ``UNION`` of the word and its expansions marked ``(expanded)``: its synonym
groups (``~group``), its phonetic code where a field it searches is PHONETIC (``<JN``), its stem
with the stem mark (``+appl``) and, when the stem is not the word, the stem itself (``appl``). The
expansions are the query expander's, whether or not the index holds them (the executor drops the
missing ones). Each node restricted to fields says so (``@name|desc:``), numbers print as C's
``%f``, attributes other than the defaults follow the node (`` => { $weight: 2; }``).
"""

from __future__ import annotations

from dataclasses import dataclass

from pion.vector import phonetic, text
from pion.vector.fields import SYNONYM_PREFIX
from pion.vector.geoshape import PREDICATES as GEOSHAPE_PREDICATES
from pion.vector.index import SearchIndex
from pion.vector.query_ast import Node, Query
from pion.vector.text import STEM_PREFIX

#: the alias RediSearch gives a KNN's distance when the query names none
DEFAULT_ALIAS = "__{field}_score"


@dataclass
class ExplainContext:
    index: SearchIndex
    verbatim: bool = False
    language: str | None = None
    expander: str = "DEFAULT"


def explain(query: Query, ctx: ExplainContext) -> list[str]:
    """The lines of FT.EXPLAIN's reply for a parsed query (without the final empty line)."""
    root = _drop_stopwords(query.root, ctx)
    lines = _lines(root, ctx, None, 0) if root is not None else ["<empty>"]
    knn = query.knn
    if knn is None:
        return lines
    alias = knn.alias or DEFAULT_ALIAS.format(field=knn.field)
    tail = (f"K={knn.k} nearest vectors to `${knn.param}` in vector index associated with field @{knn.field}, "
            f"yields distance as `{alias}`")
    if root is None or root.kind == "all":
        return [f"VECTOR {{{tail}}}"]
    return ["VECTOR {"] + ["  " + line for line in lines] + ["} => {" + tail + "}"]


def _drop_stopwords(node: Node, ctx: ExplainContext) -> Node | None:
    """The tree without its stop-words (RediSearch's parser never makes nodes of them)."""
    kind = node.kind
    if kind == "term":
        return None if node.value in ctx.index.definition.stopword_set else node
    if kind in ("and", "or"):
        kept = [c for c in (_drop_stopwords(child, ctx) for child in node.children) if c is not None]
        if not kept:
            return None
        if len(kept) == 1 and not node.attrs:
            return kept[0]
        return Node(kind, node.value, kept, node.fields, node.attrs)
    if kind in ("not", "opt", "fields"):
        inner = _drop_stopwords(node.children[0], ctx)
        if inner is None:
            return None
        return Node(kind, node.value, [inner], node.fields, node.attrs)
    return node


def _mask(fields: list[str] | None, ctx: ExplainContext) -> str:
    """A field restriction as RediSearch prints it on each node: its TEXT fields only (a text
    node's mask is a TEXT field bitmask), ``@NULL:`` when it names none."""
    if not fields:
        return ""
    text = {spec.name for spec in ctx.index.definition.fields if spec.type == "TEXT"}
    names = [name for name in fields if name in text]
    return "@" + ("|".join(names) if names else "NULL") + ":"


def _f(value: float) -> str:
    """C's ``%f``."""
    if value in (float("inf"), float("-inf")):
        return "inf" if value > 0 else "-inf"
    return f"{value:.6f}"


def _g(value: float) -> str:
    """C's ``%g``."""
    return f"{value:g}"


def _attrs(node: Node) -> str:
    """RediSearch's `` => { $weight: w; $slop: s; $inorder: b; }`` of a node with attributes."""
    attrs = node.attrs
    weight = float(attrs.get("weight", 1.0))
    slop = attrs.get("slop")
    inorder = attrs.get("inorder", False)
    if weight == 1.0 and slop is None and not inorder:
        return ""
    out = " => {"
    if weight != 1.0:
        out += f" $weight: {_g(weight)};"
    if slop is not None:
        out += f" $slop: {slop};"
    if inorder or slop is not None:
        out += f" $inorder: {'true' if inorder else 'false'};"
    return out + " }"


def expansions(word: str, ctx: ExplainContext, fields: list[str] | None, sounds: bool | None) -> list[str]:
    """The query expander's terms for a word (RediSearch's DEFAULT expander: synonyms, phonetic
    code, stem; SYNONYM: synonyms only), in its order."""
    if ctx.verbatim:
        return []
    out = [SYNONYM_PREFIX + group for group in ctx.index.synonyms.get(word, ())]
    if ctx.expander == "SYNONYM":
        return out
    definition = ctx.index.definition
    if sounds is not False:
        names = fields or [spec.name for spec in definition.fields if spec.type == "TEXT"]
        if any(spec is not None and spec.phonetic for spec in map(definition.field, names)):
            code = phonetic.code(word)
            if code is not None:
                out.append(code)
    language = ctx.language or definition.language
    if text.stemming_available(language):
        root = text.stem_always(word, language)
        out.append(STEM_PREFIX + root)
        if root != word:
            out.append(root)
    return out


def _lines(node: Node, ctx: ExplainContext, fields: list[str] | None, depth: int) -> list[str]:
    pad = "  " * depth
    mask = _mask(fields, ctx)
    kind = node.kind
    if kind == "fields":
        return _lines(node.children[0], ctx, node.fields, depth)
    if kind in ("and", "or"):
        head = "INTERSECT {" if kind == "and" else "UNION {"
        lines = [pad + mask + head]
        for child in node.children:
            lines += _lines(child, ctx, fields, depth + 1)
        return lines + [pad + "}" + _attrs(node)]
    if kind in ("not", "opt"):
        lines = [pad + mask + ("NOT{" if kind == "not" else "OPTIONAL{")]
        lines += _lines(node.children[0], ctx, fields, depth + 1)
        return lines + [pad + "}" + _attrs(node)]
    if kind == "term":
        weight = float(node.attrs.get("weight", 1.0))
        word = node.value + (f" => {{$weight: {_g(weight)};}}" if weight != 1.0 else "")
        more = [] if node.attrs.get("exact") else expansions(node.value, ctx, fields, node.attrs.get("phonetic"))
        if not more:
            return [pad + mask + word]
        return ([pad + mask + "UNION {", pad + "  " + mask + word]
                + [pad + "  " + mask + term + "(expanded)" for term in more] + [pad + "}"])
    if kind == "phrase":
        lines = [pad + mask + "EXACT {"]
        lines += [pad + "  " + mask + w for w in node.value if w not in ctx.index.definition.stopword_set]
        return lines + [pad + "}" + _attrs(node)]
    if kind in ("prefix", "suffix", "infix", "fuzzy", "wildcard"):
        return [pad + mask + _pattern(kind, node.value)]
    if kind == "tag":
        lines = [pad + f"TAG:@{node.fields[0]} {{"]  # type: ignore[index]
        for how, value in node.value:
            lines.append(pad + "  " + (value if how == "exact" else _pattern(how, value)))
        return lines + [pad + "}" + _attrs(node)]
    if kind == "numeric":
        lo, hi, lo_ex, hi_ex = node.value
        return [pad + f"NUMERIC {{{_f(lo)} <{'' if lo_ex else '='} @{node.fields[0]} "  # type: ignore[index]
                f"<{'' if hi_ex else '='} {_f(hi)}}}" + _attrs(node)]
    if kind == "geo":
        lon, lat, meters = node.value
        radius, unit = node.attrs.get("given", (meters, "m"))
        return [pad + f"GEO {node.fields[0]}:{{{_f(lon)},{_f(lat)} --> {_f(radius)} {unit}}}" + _attrs(node)]  # type: ignore[index]
    if kind == "geoshape":
        return [pad + mask + f"GEOSHAPE{{{GEOSHAPE_PREDICATES[node.value[0]]} {node.value[1]}}}"]
    if kind == "vrange":
        return [pad + f"VECTOR {{Vectors that are within {_g(node.value[0])} distance radius from "
                f"`${node.attrs.get('param', 'BLOB')}` in vector index associated with field @{node.fields[0]}}}"]  # type: ignore[index]
    if kind == "missing":
        return [pad + f"ISMISSING{{{node.fields[0]}}}"]  # type: ignore[index]
    if kind == "all":
        return [pad + "<WILDCARD>"]
    if kind == "emptystr":  # '' / "" on an INDEXEMPTY field (DIALECT 2)
        return [pad + mask + '""']
    return [pad + "<empty>"]


def _pattern(kind: str, value: str) -> str:
    return {"prefix": f"PREFIX{{{value}*}}", "suffix": f"SUFFIX{{*{value}}}", "infix": f"INFIX{{*{value}*}}",
            "fuzzy": f"FUZZY{{{value}}}", "wildcard": f"WILDCARD{{{value}}}"}[kind]
