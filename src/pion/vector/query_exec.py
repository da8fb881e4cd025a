"""Evaluating a parsed query against one index: documents that match, with their raw text scores.

Each node answers ``{doc_id: raw score}``. A term matches the documents whose postings hold the
word or (unless VERBATIM or the field is NOSTEM) its stem; its contribution is the scorer's term
score times the node weight. AND keeps the documents every required child has and sums scores
(``~optional`` children add, never filter); OR unites and sums; NOT is all documents minus its
child. Tags, numbers, geo, ``ismissing`` and vector ranges filter without scoring. Vector range
distances are recorded in ``extras`` under ``$YIELD_DISTANCE_AS``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pion.protocol.errors import ReplyError
from pion.storage.budget import UNLIMITED, Budget
from pion.vector import chinese, phonetic, scoring, text
from pion.vector import query_leaves as leaves
from pion.vector.fields import FIELD_SHIFT, SYNONYM_PREFIX
from pion.vector.index import SearchIndex
from pion.vector.query_parser import Node
from pion.vector.text import STEM_PREFIX

Hits = dict[int, float]
#: a node's evaluation counts as this many items of the budget (it reads the clock every node or so)
EVERY_NODE = 64
#: nodes that filter without offsets; inside an intersection each still adds its frequency 1 to the
#: score (RediSearch's non-term results), see ``scoring.filter_score``
FILTER_KINDS = frozenset(("tag", "numeric", "geo", "geoshape"))
_LOW = FIELD_SHIFT - 1  # a position's document offset (its high bits are the field number)


@dataclass
class ExecContext:
    index: SearchIndex
    scorer: str = scoring.DEFAULT
    verbatim: bool = False
    infields: list[str] | None = None
    slop: int | None = None
    inorder: bool = False
    stopwords_off: bool = False
    extras: dict[int, dict[str, Any]] = field(default_factory=dict)
    max_expansions: int = 200
    min_prefix: int = 2
    language: str | None = None  # the query's LANGUAGE (stems query words); default: the index's
    expander: str = "DEFAULT"  # DEFAULT: stems and synonyms; SYNONYM: synonyms only
    #: the query's time budget (TIMEOUT): every loop below ticks it, past it ``QueryTimeout``
    budget: Budget = UNLIMITED
    slops: dict[int, int] = field(default_factory=dict)  # TFIDF's distance penalty per document, where not 1
    #: FT.PROFILE's recorder (``query_profile.Profiler``); None otherwise, and then costs one test a node
    profile: Any = None


def evaluate(node: Node, ctx: ExecContext) -> Hits:
    """Matching documents; a query of stop-words only matches nothing, as in RediSearch."""
    hits = _eval(node, ctx, ctx.infields)
    if hits and ctx.scorer in ("TFIDF", "TFIDF.DOCNORM", "BM25"):
        root, fields = node, ctx.infields
        while root.kind == "fields":  # @f:(a b)
            fields = _restrict(ctx, root.fields, root, fields)
            root = root.children[0]
        if root.kind == "and":
            ctx.slops = _term_distances(root, ctx, hits, fields)
        elif root.kind == "term":
            ctx.slops = _expansion_distances(root, ctx, hits, fields)
    return {} if hits is None else hits


def _expansion_distances(node: Node, ctx: ExecContext, hits: Hits, fields: list[str] | None) -> dict[int, int]:
    """TFIDF's distance penalty of a lone term: RediSearch's root result is then the union of the
    word and its expansions (synonyms, phonetic code, stem), and ``IndexResult_MinOffsetDelta``
    walks the union's matching children as it walks an intersection's (measured on 2.10.5: "thomas"
    matching itself, ``<TMS`` and ``+thoma`` at one offset scores a third less, 2 children apart)."""
    lists = _offset_lists(node, ctx, fields)
    if len(lists) < 2:
        return {}
    out: dict[int, int] = {}
    low = _LOW
    for doc in hits:
        offsets = []
        for plist, mask in lists:
            posting = plist.get(doc)
            if posting is None or (mask is not None and not posting.mask & mask):
                continue
            offsets.append(sorted({p & low for p in posting.positions if mask is None or (1 << (p >> 20)) & mask}))
        if len(offsets) < 2 or not all(offsets):
            continue
        dist = sum(_least_distance(a, b) ** 2 for a, b in zip(offsets, offsets[1:], strict=False))
        slop = math.isqrt(dist) if dist else len(offsets) - 1
        if slop != 1:
            out[doc] = max(slop, 1)
    return out


def _offset_lists(node: Node, ctx: ExecContext, fields: list[str] | None) -> list[tuple[dict, int | None]]:
    """The posting lists whose offsets a query node's result carries (empty: a node without offsets,
    such as a tag or a number), each with the field mask its offsets are read under."""
    if node.kind == "fields":
        return _offset_lists(node.children[0], ctx, _restrict(ctx, node.fields, node, fields))
    if node.kind == "term":
        if _is_stopword(ctx, node.value):
            return []
        mask = _field_mask(ctx, fields)
        return [(pl, mask) for pl in _postings(ctx, node.value, not node.attrs.get("exact"), fields,
                                               node.attrs.get("phonetic"))]
    if node.kind in ("or", "and"):
        return [item for child in node.children if child.kind != "opt" for item in _offset_lists(child, ctx, fields)]
    if node.kind == "phrase":
        mask = _field_mask(ctx, fields)
        postings = ctx.index.text.postings
        return [(postings[w], mask) for w in node.value if w in postings and not _is_stopword(ctx, w)]
    return []


def _term_distances(node: Node, ctx: ExecContext, hits: Hits, fields: list[str] | None) -> dict[int, int]:
    """TFIDF's distance penalty, as RediSearch's ``IndexResult_MinOffsetDelta`` of the root
    intersection: its children in the intersect iterator's order (fewest documents first), and for
    each two consecutive children with offsets (text terms) the least distance between their
    offsets; the penalty is the integer square root of the squares' sum, or (no pair) the number of
    children less one. Only documents whose penalty is not 1 are returned."""
    children = [c for c in node.children if c.kind != "opt"]
    if len(children) < 2:
        return {}
    with_offsets = []
    for order, child in enumerate(children):
        lists = _offset_lists(child, ctx, fields)
        if lists:
            with_offsets.append((sum(len(pl) for pl, _ in lists), order, lists))
    with_offsets.sort(key=lambda item: (item[0], item[1]))
    low = _LOW
    out: dict[int, int] = {}
    for doc in hits:
        offsets = []
        for _, _, lists in with_offsets:
            found = sorted({p & low for pl, mask in lists if doc in pl for p in pl[doc].positions
                            if mask is None or (1 << (p >> 20)) & mask})
            if found:
                offsets.append(found)
        dist = 0
        for a, b in zip(offsets, offsets[1:], strict=False):
            dist += _least_distance(a, b) ** 2
        slop = math.isqrt(dist) if dist else len(children) - 1
        if slop != 1:
            out[doc] = max(slop, 1)
    return out


def _least_distance(a: list[int], b: list[int]) -> int:
    """The walk of RediSearch's MinOffsetDelta over two sorted offset lists (stops at distance 1)."""
    i = j = 0
    best = abs(b[0] - a[0])
    while best > 1 and i < len(a) and j < len(b):
        best = min(best, abs(b[j] - a[i]))
        if b[j] > a[i]:
            i += 1
        else:
            j += 1
    return best


def _is_stopword(ctx: ExecContext, word: str) -> bool:
    return not ctx.stopwords_off and word in ctx.index.definition.stopword_set


def _eval(node: Node, ctx: ExecContext, fields: list[str] | None) -> Hits:
    profile = ctx.profile
    if profile is not None and profile.current is not node:
        return profile.measure(node, ctx, fields)
    kind = node.kind
    ctx.budget.tick(EVERY_NODE)
    weight = float(node.attrs.get("weight", 1.0))
    if kind == "all":
        return dict.fromkeys(ctx.index.docs, 0.0)
    if kind == "none":
        return {}
    if kind == "fields":
        return _eval(node.children[0], ctx, _restrict(ctx, node.fields, node, fields))
    if kind == "and":
        return _and(node, ctx, fields, weight)
    if kind == "or":
        out: Hits = {}
        seen = False
        for child in node.children:
            hits = _eval(child, ctx, fields)
            if hits is None:  # a stop-word: no part of the union
                continue
            seen = True
            ctx.budget.tick(len(hits))
            if ctx.scorer == "DISMAX":  # DISMAX: a union scores its best child
                for doc, score in hits.items():
                    out[doc] = max(out.get(doc, 0.0), score * weight)
                continue
            for doc, score in hits.items():
                out[doc] = out.get(doc, 0.0) + score * weight
        return out if seen else None
    if kind == "not":
        inner = _eval(node.children[0], ctx, fields) or {}
        ctx.budget.tick(len(ctx.index.docs) >> 3)
        return {doc: 0.0 for doc in ctx.index.docs if doc not in inner}
    if kind == "opt":
        inner = _eval(node.children[0], ctx, fields) or {}
        ctx.budget.tick(len(ctx.index.docs) >> 3)
        return {doc: inner.get(doc, 0.0) * weight for doc in ctx.index.docs}
    if kind == "term":
        if _is_stopword(ctx, node.value):
            return None  # dropped from the query, as RediSearch drops stop-words
        return _term(node.value, ctx, fields, weight, expand=not node.attrs.get("exact"),
                     sounds=node.attrs.get("phonetic"))
    if kind == "phrase":
        return _phrase(node, ctx, fields, weight)
    if kind in ("prefix", "suffix", "infix", "fuzzy", "wildcard"):
        return _expansion(node, ctx, fields, weight)
    if kind == "tag":
        return leaves.tag(node, ctx)
    if kind == "numeric":
        return leaves.numeric(node, ctx)
    if kind == "geo":
        return leaves.geo(node, ctx)
    if kind == "geoshape":
        return leaves.geoshape_leaf(node, ctx)
    if kind == "missing":
        return leaves.missing(node, ctx)
    if kind == "emptystr":
        return leaves.empty_text(ctx, fields)
    if kind == "vrange":
        return leaves.vector_range(node, ctx)
    raise ReplyError(f"Unsupported query node {kind}")


#: the field restriction of ``@a:(@b:x)`` or ``@a:x`` under ``INFIELDS 1 b``: no TEXT field (every
#: term's mask is 0, so it matches nothing)
NO_FIELD = "\0"


def _restrict(ctx: ExecContext, names: list[str] | None, node: Node, outer: list[str] | None = None) -> list[str]:
    """The fields a ``@field:`` node searches: its own, within the ones around it (an outer
    modifier or INFIELDS), as RediSearch intersects the field masks (``NO_FIELD`` when none is
    left: the node matches nothing, and its negation everything)."""
    definition = ctx.index.definition
    for name in names or ():
        if definition.field(name) is None:
            raise ReplyError(f"Unknown field at offset 0 near {name}")
    own = list(names or ())
    if outer is None:
        return own
    return [name for name in own if name in outer] or [NO_FIELD]


def _and(node: Node, ctx: ExecContext, fields: list[str] | None, weight: float) -> Hits:
    required = [c for c in node.children if c.kind != "opt"]
    optional = [c for c in node.children if c.kind == "opt"]
    results = [r for r in (_eval(child, ctx, fields) for child in required) if r is not None]
    if not results and not optional:
        return None
    if not results:
        base: Hits = dict.fromkeys(ctx.index.docs, 0.0)
    else:
        results.sort(key=len)
        base = dict(results[0])
        for other in results[1:]:
            ctx.budget.tick(len(base))
            base = {doc: score + other[doc] for doc, score in base.items() if doc in other}
            if not base:
                return {}
        if ctx.slop is not None or ctx.inorder:
            base = _proximity(ctx, [c for c in required if c.kind == "term"], fields, base)
        filters = sum(1 for c in required if c.kind in FILTER_KINDS)
        if filters:
            extra = filters * scoring.filter_score(ctx.scorer, ctx.index.avg_doc_len)
            if extra:
                base = {doc: score + extra for doc, score in base.items()}
    for child in optional:
        inner = _eval(child.children[0], ctx, fields) or {}
        w = float(child.attrs.get("weight", 1.0))
        for doc in base:
            if doc in inner:
                base[doc] += inner[doc] * w
    if weight != 1.0:
        base = {doc: score * weight for doc, score in base.items()}
    return base


def _proximity(ctx: ExecContext, terms: list[Node], fields: list[str] | None, base: Hits) -> Hits:
    """SLOP / INORDER over the terms of an intersection (positions of the word or its stem)."""
    kept = [t for t in terms if not _is_stopword(ctx, t.value)]
    if len(kept) < 2:
        return base
    slop = ctx.slop if ctx.slop is not None else 1 << 30
    mask = _field_mask(ctx, fields)
    lists = [_postings(ctx, t.value, True, fields, t.attrs.get("phonetic")) for t in kept]
    out: Hits = {}
    tick = ctx.budget.tick
    for doc, score in base.items():
        tick()
        positions = []
        for plists in lists:
            pos = sorted({p & _LOW for plist in plists if doc in plist for p in plist[doc].positions
                          if mask is None or (1 << (p >> 20)) & mask})
            positions.append(pos)
        if all(positions) and _within(positions, slop, ctx.inorder):
            out[doc] = score
    return out


def _field_mask(ctx: ExecContext, fields: list[str] | None) -> int | None:
    if not fields:
        return None
    mask = 0
    numbers = ctx.index.text_numbers
    for name in fields:
        if name in numbers:
            mask |= 1 << numbers[name]
    return mask


def _postings(ctx: ExecContext, word: str, expand: bool, fields: list[str] | None,
              sounds: bool | None = None) -> list[dict]:
    """The word's postings and its expansions' (synonyms, phonetic code, stem), as RediSearch's
    DEFAULT expander. ``sounds``: the term's ``$phonetic`` attribute (None: not given)."""
    postings = ctx.index.text.postings
    return [postings[name] for name in posting_names(ctx, word, expand, fields, sounds)]


def posting_names(ctx: ExecContext, word: str, expand: bool, fields: list[str] | None,
                  sounds: bool | None = None) -> list[str]:
    """The index terms a query word reads: the word, its synonym groups and its stem (``+root``),
    those the index has. HIGHLIGHT/SUMMARIZE ask the same to know which terms matched."""
    postings = ctx.index.text.postings
    names = []
    if word in postings:
        names.append(word)
    if expand and not ctx.verbatim:
        for group in ctx.index.synonyms.get(word, ()):
            if SYNONYM_PREFIX + group in postings:
                names.append(SYNONYM_PREFIX + group)
    if _phonetic(ctx, fields, sounds) and expand and not ctx.verbatim and ctx.expander != "SYNONYM":
        sound = phonetic.code(word)
        if sound is not None and sound in postings:
            names.append(sound)
    if expand and not ctx.verbatim and ctx.expander != "SYNONYM":
        root = text.stem(word, ctx.language or ctx.index.definition.language)
        if not _all_nostem(ctx, fields):
            if STEM_PREFIX + (root or word) in postings:
                names.append(STEM_PREFIX + (root or word))
            if root and root != word and root in postings:  # RediSearch expands to the bare stem too
                names.append(root)  # ("running" finds a document that says "run")
    return names


def _phonetic(ctx: ExecContext, fields: list[str] | None, sounds: bool | None) -> bool:
    """A term is expanded with its sound where a field it searches is PHONETIC, unless its
    ``$phonetic`` is false; the attribute on fields none of which is phonetic is RediSearch's error."""
    definition = ctx.index.definition
    names = fields or [spec.name for spec in definition.fields if spec.type == "TEXT"]
    has = any(spec is not None and spec.phonetic for spec in map(definition.field, names))
    if sounds is not None and not has:
        raise ReplyError(phonetic.NOT_PHONETIC)
    return has and sounds is not False


def check_phonetic(node: Node, definition, fields: list[str] | None = None) -> None:
    """RediSearch refuses ``$phonetic`` on fields none of which is phonetic while it parses the
    query, so FT.EXPLAIN answers the error too (FT.SEARCH meets it in ``_phonetic``)."""
    if node.kind == "fields":
        fields = node.fields
    elif node.kind == "term" and "phonetic" in node.attrs:
        names = fields or [spec.name for spec in definition.fields if spec.type == "TEXT"]
        if not any(spec is not None and spec.phonetic for spec in map(definition.field, names)):
            raise ReplyError(phonetic.NOT_PHONETIC)
    for child in node.children:
        check_phonetic(child, definition, fields)


def _all_nostem(ctx: ExecContext, fields: list[str] | None) -> bool:
    definition = ctx.index.definition
    names = fields or [spec.name for spec in definition.fields if spec.type == "TEXT"]
    specs = [definition.field(name) for name in names]
    return all(spec is not None and spec.nostem for spec in specs)


def _segmented(ctx: ExecContext) -> bool:
    """The query's words are cut into Chinese words (the query's LANGUAGE, else the index's, is chinese)."""
    return (ctx.language or ctx.index.definition.language) == chinese.LANGUAGE


def _term(word: str, ctx: ExecContext, fields: list[str] | None, weight: float, expand: bool = True,
          sounds: bool | None = None) -> Hits:
    index = ctx.index
    if _segmented(ctx) and chinese.has_cjk(word):
        words = chinese.query_words(word)
        if len(words) > 1:  # every word must match, as RediSearch intersects friso's words
            parts = [_term(w, ctx, fields, weight, expand, sounds) for w in words]
            parts.sort(key=len)
            out = parts[0]
            for other in parts[1:]:
                out = {doc: score + other[doc] for doc, score in out.items() if doc in other}
            return out
    if not ctx.stopwords_off and word in index.definition.stopword_set:
        return {}
    mask = _field_mask(ctx, fields)
    if fields and not mask:
        return {}
    return term_lists(ctx, _postings(ctx, word, expand, fields, sounds), index.text.postings.get(word), mask, weight)


def term_lists(ctx: ExecContext, plists: list[dict], direct: dict | None, mask: int | None, weight: float) -> Hits:
    """A term's documents and scores from its posting lists (the word's own, ``direct``, and its
    expansions'); FT.PROFILE reads them one list at a time, as RediSearch's union of term readers."""
    index = ctx.index
    total = len(index.docs)
    avg = index.avg_doc_len
    doc_len = index.text.doc_len
    out: Hits = {}
    tick = ctx.budget.tick
    dismax = ctx.scorer == "DISMAX"
    for plist in plists:
        tick(len(plist) >> 3)
        # RediSearch gives the term's weight to the word itself, not to its expansions
        w = weight if plist is direct else 1.0
        matching = [(d, p) for d, p in plist.items() if mask is None or p.mask & mask]
        n = len(plist)  # the term's document count, whatever the field mask (RediSearch's IDF)
        for doc, posting in matching:
            tick()
            contribution = scoring.term_score(ctx.scorer, posting.freq, w, total, n, doc_len.get(doc, 0), avg)
            if dismax:  # the word and its expansions are a union: DISMAX takes the best
                out[doc] = max(out.get(doc, 0.0), contribution)
            else:
                out[doc] = out.get(doc, 0.0) + contribution
    return out


def _phrase(node: Node, ctx: ExecContext, fields: list[str] | None, weight: float) -> Hits:
    words = [w for w in node.value if ctx.stopwords_off or w not in ctx.index.definition.stopword_set]
    if _segmented(ctx):
        words = [part for w in words for part in chinese.query_words(w)]
    if not words:
        return {}
    slop = node.attrs.get("slop", ctx.slop if ctx.slop is not None else 0)
    inorder = node.attrs.get("inorder", True if "slop" not in node.attrs and ctx.slop is None else ctx.inorder)
    mask = _field_mask(ctx, fields)
    postings = ctx.index.text.postings
    per_word = []
    for word in words:
        plist = postings.get(word)
        if plist is None:
            return {}
        per_word.append(plist)
    scores = [_term(word, ctx, fields, 1.0, expand=False) for word in words]
    candidates = set(per_word[0])
    for plist in per_word[1:]:
        candidates &= plist.keys()
    out: Hits = {}
    tick = ctx.budget.tick
    for doc in candidates:
        tick()
        positions = [sorted(p & _LOW for p in plist[doc].positions if mask is None or (1 << (p >> 20)) & mask)
                     for plist in per_word]
        if _within(positions, slop, inorder):
            out[doc] = sum(s.get(doc, 0.0) for s in scores) * weight
    return out


def _within(positions: list[list[int]], slop: int, inorder: bool) -> bool:
    """Some choice of one offset per word spans at most len+slop (in order if asked). Offsets run on
    across a document's fields, so, as in RediSearch, words in two fields can be near each other."""
    if inorder:
        def search(i: int, prev: int, first: int) -> bool:
            if i == len(positions):
                return True
            for pos in positions[i]:
                if pos > prev and (pos - first) - i <= slop:
                    if search(i + 1, pos, first):
                        return True
            return False
        return any(search(1, start, start) for start in positions[0])
    merged = sorted((pos, i) for i, plist in enumerate(positions) for pos in plist)
    need = len(positions)
    counts = [0] * need
    have = 0
    left = 0
    for right in range(len(merged)):
        word = merged[right][1]
        if counts[word] == 0:
            have += 1
        counts[word] += 1
        while have == need:
            span = merged[right][0] - merged[left][0]
            if span - (need - 1) <= slop:
                return True
            lw = merged[left][1]
            counts[lw] -= 1
            if counts[lw] == 0:
                have -= 1
            left += 1
    return False


def expansion_terms(node: Node, ctx: ExecContext) -> list[str]:
    """The index terms a prefix, suffix, infix, fuzzy or wildcard node expands to (at most
    MAXEXPANSIONS, a prefix shorter than MINPREFIX: none)."""
    word = node.value
    kind = node.kind
    if kind in ("prefix", "suffix", "infix") and len(word) < ctx.min_prefix:
        return []
    if kind == "prefix":
        def predicate(term): return term.startswith(word)
    elif kind == "suffix":
        def predicate(term): return term.endswith(word)
    elif kind == "infix":
        def predicate(term): return word in term
    elif kind == "fuzzy":
        distance = node.attrs.get("distance", 1)

        def predicate(term): return text.edit_distance_at_most(term, word, distance)
    else:
        def predicate(term): return text.wildcard_match(word, term)
    tick = ctx.budget.tick
    matches = predicate

    def counted(term: str) -> bool:  # the scan over every term of the index ticks the budget
        tick()
        return matches(term)
    return ctx.index.text.terms_matching(counted, ctx.max_expansions)


def _expansion(node: Node, ctx: ExecContext, fields: list[str] | None, weight: float) -> Hits:
    out: Hits = {}
    tick = ctx.budget.tick
    for term in expansion_terms(node, ctx):
        tick(EVERY_NODE)
        for doc, score in _term(term, ctx, fields, weight, expand=False).items():
            out[doc] = out.get(doc, 0.0) + score
    return out


def doc_ids(hits: Hits) -> np.ndarray:
    return np.fromiter(sorted(hits), dtype=np.int64, count=len(hits))
