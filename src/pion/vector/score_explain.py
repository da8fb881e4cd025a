"""FT.SEARCH ... WITHSCORES EXPLAINSCORE: how a returned document's score was made, as RediSearch
words it (``ext/default.c``'s explanations).

RediSearch explains the result tree of the document: each term reader's contribution
(``(TFIDF 2.00 = Weight 1.00 * TF 2 * IDF 1.00)``), each union or intersection summing its
children (``(Weight 1.00 * total children TFIDF 4.00)``), a filter's virtual result
(``(TFIDF 1.00 = Weight 1.00 * Frequency 1)``), and at the top the scorer's final step
(``Final TFIDF : words TFIDF 4.00 * document score 1.00 / norm 3 / slop 1``). Pion's evaluator keeps
only each document's sum, so the tree is made again here, for the returned page only, by walking
the query with the evaluator's own formulas (``scoring``) and readers (``query_exec``): its
numbers add up to the score the document was given. A node is ``text`` or ``[text, [child, ...]]``.
"""

from __future__ import annotations

from typing import Any

from pion.vector import query_exec, scoring
from pion.vector.query_ast import Node

FILTERS = frozenset(("tag", "numeric", "geo", "geoshape", "missing", "vrange"))
_AGG = {"TFIDF": "(Weight {w:.2f} * total children TFIDF {v:.2f})", "TFIDF.DOCNORM": None,
        "BM25": "(Weight {w:.2f} * children BM25 {v:.2f})", "BM25STD": None, "BM25STD.TANH": None,
        "DISMAX": "{wv:.2f} = Weight {w:.2f} * children DISMAX {v:.2f}"}
_AGG["TFIDF.DOCNORM"] = _AGG["TFIDF"]
_AGG["BM25STD"] = _AGG["BM25STD.TANH"] = _AGG["BM25"]


class _Explainer:
    def __init__(self, plan: Any, doc: int) -> None:
        self.ctx: query_exec.ExecContext = plan.ctx
        self.index = self.ctx.index
        self.scorer = self.ctx.scorer
        self.doc = doc
        self.total = len(self.index.docs)
        self.avg = self.index.avg_doc_len
        self.doc_len = self.index.text.doc_len.get(doc, 0)

    # -- leaves ---------------------------------------------------------------------------------

    def term(self, name: str, plist: dict, weight: float) -> tuple[float, Any]:
        posting = plist[self.doc]
        freq, n = posting.freq, len(plist)
        value = scoring.term_score(self.scorer, freq, weight, self.total, n, self.doc_len, self.avg)
        s = self.scorer
        if s in ("TFIDF", "TFIDF.DOCNORM"):
            return value, f"(TFIDF {value:.2f} = Weight {weight:.2f} * TF {freq:d} * IDF {scoring.idf(self.total, n):.2f})"
        if s == "BM25":
            return value, (f"({value:.2f} = Weight {weight:.2f} * IDF {scoring.idf(self.total, n):.2f} * F {freq:d} / "
                           f"(F {freq:d} + k1 1.2 * (1 - b 0.5 + b 0.5 * Average Len {self.avg:.2f})))")
        if s in scoring.BM25STD_FAMILY:
            return value, (f"{name}: ({value:.2f} = Weight {weight:.2f} * IDF {scoring.idf_bm25(self.total, n):.2f} * "
                           f"(F {freq:.2f} * (k1 1.2 + 1)) / (F {freq:.2f} + k1 1.2 * (1 - b 0.75 + b 0.75 * "
                           f"Doc Len {self.doc_len} / Average Doc Len {self.avg:.2f})))")
        return value, f"DISMAX {value:.2f} = Weight {weight:.2f} * Frequency {freq:d}"

    def virtual(self, value: float, freq: int, weight: float = 1.0) -> tuple[float, Any]:
        """A result without a term (a tag, number, place, NOT, the wildcard, an optional part the
        document lacks: weight 0): its frequency."""
        s = self.scorer
        if s in ("TFIDF", "TFIDF.DOCNORM"):
            return value, f"(TFIDF {value:.2f} = Weight {weight:.2f} * Frequency {freq})"
        if s == "BM25":
            if not freq:
                return value, "Frequency 0 -> value 0"
            return value, (f"({value:.2f} = Weight {weight:.2f} * F {freq} / (F {freq} + k1 1.2 * (1 - b 0.5 + "
                           f"b 0.5 * Average Len {self.avg:.2f})))")
        if s == "DISMAX":
            return value, f"DISMAX {value:.2f} = Weight {weight:.2f} * Frequency {freq}"
        return value, "Irrelevant token -> score is 0"  # BM25STD scores words only

    def estimate(self, node: Node, fields: list[str] | None) -> int:
        """RediSearch's estimate of a node's result count, by which its intersection orders its
        children (fewest first): a reader's list length, a union's sum, an intersection's least."""
        kind = node.kind
        ctx = self.ctx
        postings = self.index.text.postings
        if kind == "fields":
            return self.estimate(node.children[0], node.fields)
        if kind == "term":
            names = query_exec.posting_names(ctx, node.value, not node.attrs.get("exact"), fields,
                                             node.attrs.get("phonetic"))
            return sum(len(postings[n]) for n in names)
        if kind in ("prefix", "suffix", "infix", "fuzzy", "wildcard"):
            return sum(len(postings[t]) for t in query_exec.expansion_terms(node, ctx))
        if kind == "phrase":
            return min((len(postings.get(w, ())) for w in node.value), default=0)
        if kind == "or":
            return sum(self.estimate(c, fields) for c in node.children)
        if kind == "and":
            return min((self.estimate(c, fields) for c in node.children if c.kind != "opt"), default=self.total)
        if kind in FILTERS:
            saved, ctx.profile = ctx.profile, None  # FT.PROFILE ... EXPLAINSCORE: not a node of the tree
            try:
                return len(query_exec._eval(node, ctx, fields) or ())
            finally:
                ctx.profile = saved
        return self.total

    def aggregate(self, weight: float, parts: list[tuple[float, Any]], dismax_max: bool = False) -> tuple[float, Any]:
        raw = max((v for v, _ in parts), default=0.0) if dismax_max else sum(v for v, _ in parts)
        text = _AGG[self.scorer].format(w=weight, v=raw, wv=weight * raw)
        return weight * raw, [text, [e for _, e in parts]]

    def wildcard(self) -> tuple[float, Any]:
        """``*``: RediSearch's virtual result of frequency 1 (BM25STD reads it as the term ``*`` of IDF 1)."""
        if self.scorer in scoring.BM25STD_FAMILY:
            norm = self.doc_len / self.avg if self.avg else 0.0
            value = 2.2 / (1.0 + 1.2 * (0.25 + 0.75 * norm))
            return value, (f"*: ({value:.2f} = Weight 1.00 * IDF 1.00 * (F 1.00 * (k1 1.2 + 1)) / (F 1.00 + k1 1.2 * "
                           f"(1 - b 0.75 + b 0.75 * Doc Len {self.doc_len} / Average Doc Len {self.avg:.2f})))")
        if self.scorer == "BM25":
            return self.virtual(1.0 / (1.0 + 1.2 * (0.5 + 0.5 * self.avg)), 1)
        return self.virtual(1.0, 1)

    # -- the query tree -------------------------------------------------------------------------

    def node(self, node: Node, fields: list[str] | None) -> tuple[float, Any] | None:
        """The document's result for this node (None: the node has none for it)."""
        kind = node.kind
        ctx = self.ctx
        weight = float(node.attrs.get("weight", 1.0))
        if kind == "fields":
            return self.node(node.children[0], query_exec._restrict(ctx, node.fields, node, fields))
        if kind == "term":
            if query_exec._is_stopword(ctx, node.value):
                return None
            return self.word(node, fields, weight)
        if kind in ("prefix", "suffix", "infix", "fuzzy", "wildcard"):
            mask = query_exec._field_mask(ctx, fields)
            parts = []
            for term in query_exec.expansion_terms(node, ctx):
                plist = self.index.text.postings[term]
                posting = plist.get(self.doc)
                if posting is not None and (mask is None or posting.mask & mask):
                    parts.append(self.term(term, plist, weight))
            return self.aggregate(1.0, parts) if parts else None
        if kind == "phrase":
            postings = self.index.text.postings
            parts = [self.term(w, postings[w], 1.0) for w in node.value
                     if not query_exec._is_stopword(ctx, w) and self.doc in postings.get(w, {})]
            return self.aggregate(weight, parts) if parts else None
        if kind == "and":
            return self.intersection(node, fields, weight)
        if kind == "or":
            parts = [p for p in (self.node(c, fields) for c in node.children) if p is not None]
            if not parts:
                return None
            return self.aggregate(weight, parts, dismax_max=self.scorer == "DISMAX")
        if kind == "opt":
            inner = self.node(node.children[0], fields)
            return (inner[0] * weight, inner[1]) if inner is not None else self.virtual(0.0, 0)
        if kind == "all":
            return self.virtual(1.0, 1)
        return self.virtual(0.0, 0)  # a filter, NOT, a vector range at the top: no score of its own

    def word(self, node: Node, fields: list[str] | None, weight: float) -> tuple[float, Any] | None:
        """A word: its readers (the word and its expansions) that hold the document; a UNION when
        the word reads more than one list, as RediSearch's iterator is."""
        ctx = self.ctx
        mask = query_exec._field_mask(ctx, fields)
        if fields and not mask:
            return None
        postings = self.index.text.postings
        names = query_exec.posting_names(ctx, node.value, not node.attrs.get("exact"), fields, node.attrs.get("phonetic"))
        direct = postings.get(node.value)
        parts = []
        for name in names:
            plist = postings[name]
            posting = plist.get(self.doc)
            if posting is not None and (mask is None or posting.mask & mask):
                parts.append(self.term(name, plist, weight if plist is direct else 1.0))
        if not parts:
            return None
        if len(names) == 1:
            return parts[0]
        return self.aggregate(1.0, parts, dismax_max=self.scorer == "DISMAX")

    def intersection(self, node: Node, fields: list[str] | None, weight: float) -> tuple[float, Any] | None:
        required = [c for c in node.children if c.kind != "opt"]
        estimates = {id(c): self.estimate(c, fields) for c in required}
        required.sort(key=lambda c: estimates[id(c)])
        found = []
        for order, child in enumerate(required):
            if child.kind == "term" and query_exec._is_stopword(self.ctx, child.value):
                continue
            if child.kind in query_exec.FILTER_KINDS:
                found.append((order, self.virtual(scoring.filter_score(self.scorer, self.avg), 1)))
                continue
            part = self.node(child, fields)
            if part is not None:
                found.append((order, part))
        for child in node.children:
            if child.kind == "opt":
                inner = self.node(child.children[0], fields)
                w = float(child.attrs.get("weight", 1.0))
                if inner is not None:
                    found.append((len(found) + 1000, (inner[0] * w, inner[1])))
                else:  # RediSearch's optional reader gives a document it lacks a virtual result of weight 0
                    found.append((len(found) + 1000, self.virtual(0.0, 1, 0.0)))
        if not found:
            return None
        return self.aggregate(weight, [part for _, part in found])


def explain(plan: Any, doc: int, score: float) -> Any:
    """The explanation of a returned document's ``score`` under the plan's scorer."""
    ctx = plan.ctx
    index = ctx.index
    scorer = ctx.scorer
    doc_score = index.doc_scores.get(doc, 1.0)
    if scorer == "DOCSCORE":
        return f"Document's score is {doc_score:.2f}".encode()
    ex = _Explainer(plan, doc)
    root = plan.query.root
    if root.kind in ("all", "none"):
        result = ex.wildcard()
    else:
        result = ex.node(root, ctx.infields) or ex.virtual(0.0, 0)
    raw, tree = result
    if scorer == "DISMAX":
        return _encode(tree)
    slop = ctx.slops.get(doc, 1)
    if scorer in ("TFIDF", "TFIDF.DOCNORM"):
        if doc_score == 0:
            return b"Document score is 0"
        norm = index.text.max_freq.get(doc, 0) if scorer == "TFIDF" else ex.doc_len
        if root.kind == "all":
            norm = max(norm, 1)
        head = f"Final TFIDF : words TFIDF {raw:.2f} * document score {doc_score:.2f} / norm {norm} / slop {slop}"
    elif scorer == "BM25":
        head = f"Final BM25 : words BM25 {raw:.2f} * document score {doc_score:.2f} / slop {slop}"
    elif scorer == "BM25STD":
        head = f"Final BM25 : words BM25 {raw:.2f} * document score {doc_score:.2f}"
    else:  # BM25STD.TANH: Redis 8 wraps BM25STD's final line in the tangent's
        inner = f"Final BM25 : words BM25 {raw:.2f} * document score {doc_score:.2f}"
        head = f"Final Normalized BM25 : tanh(stretch factor 1/{scoring.TANH_FACTOR:g} * Final BM25 {doc_score * raw:.2f})"
        return [head.encode(), [[inner.encode(), [_encode(tree)]]]]
    return [head.encode(), [_encode(tree)]]


def _encode(tree: Any) -> Any:
    if isinstance(tree, str):
        return tree.encode()
    text, children = tree
    return [text.encode(), [_encode(c) for c in children]]
