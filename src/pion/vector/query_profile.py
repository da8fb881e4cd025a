"""FT.PROFILE's record of one query's evaluation: the iterator tree and the result processors.

RediSearch answers a profile with the tree of iterators its query ran (UNION, INTERSECT, NOT,
OPTIONAL, TEXT, TAG, NUMERIC, GEO, WILDCARD, VECTOR, EMPTY), each with the time it took and how
many results it produced, and the chain of result processors after it (Index, Scorer, Sorter,
Loader, ...). Pion's evaluator (``query_exec``) works on whole document sets, node by node, so the
profile is the same tree drawn from that evaluation: ``Profiler.measure`` runs each query node and
records its wall time and the size of the set it produced (``Counter``); a word is read one posting
list at a time (its own, then its expansions': a UNION of TEXT readers, one reader alone is the
reader), a prefix, suffix, infix, fuzzy or wildcard word is the UNION of the terms it expanded to,
a tag set the UNION of its values. ``Size`` is the length of the list a reader reads. An
intersection lists its children in the order Pion intersects them (smallest set first), its
optional children after them. The evaluator calls ``measure`` only when ``ExecContext.profile`` is
set: without FT.PROFILE the cost is one attribute test per query node.

Where a count differs from RediSearch's it is because RediSearch iterates lazily (an intersection's
child is read only up to what the intersection needs, a NOT counts the documents it skipped over),
while Pion's counts are the sizes of the sets it built; docs/compat-differences.md says so.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pion.vector import chinese, query_exec, query_leaves
from pion.vector.query_ast import Node

_clock = time.perf_counter


@dataclass
class Record:
    """One iterator of the profile."""

    type: str
    counter: int
    time: float = 0.0  # ms
    term: str | None = None
    query_type: str | None = None
    size: int | None = None
    children: list[Record] = field(default_factory=list)
    single: bool = False  # NOT, OPTIONAL, VECTOR: "Child iterator" (one), else "Child iterators"
    node: Node | None = None


@dataclass
class Stage:
    """One result processor of the profile."""

    type: str
    counter: int
    time: float = 0.0  # ms


_EXPANSION_TYPES = {"prefix": "PREFIX", "suffix": "PREFIX", "infix": "PREFIX", "fuzzy": "FUZZY",
                    "wildcard": "WILDCARD"}  # RediSearch 2.10 names a suffix's and an infix's union PREFIX too


class Profiler:
    def __init__(self) -> None:
        self.current: Node | None = None
        self.frames: list[list[Record]] = [[]]
        self.stages: list[Stage] = []
        self.parse_ms = 0.0
        self.pipeline_ms = 0.0
        #: ``search.finish`` records Scorer, Sorter and Pager/Limiter (FT.SEARCH; FT.AGGREGATE has its steps)
        self.search_stages = True
        self.highlight_ms = 0.0  # HIGHLIGHT / SUMMARIZE's share of the reply's loading
        self.loaded = 0  # the rows the reply loaded
        self.timed_out = False  # the query ran out of its TIMEOUT under ON_TIMEOUT RETURN

    # -- the iterator tree ---------------------------------------------------------------------

    def root(self) -> Record:
        """The tree's root (EMPTY when the query kept no node: stop-words only)."""
        found = self.frames[0]
        return found[-1] if found else Record("EMPTY", 0)

    def replace_root(self, record: Record) -> None:
        self.frames[0] = [record]

    def measure(self, node: Node, ctx: query_exec.ExecContext, fields: list[str] | None) -> Any:
        kind = node.kind
        if kind == "term" and not (query_exec._segmented(ctx) and chinese.has_cjk(node.value)):
            return self._term(node, ctx, fields)
        if kind in _EXPANSION_TYPES:
            return self._expansion(node, ctx, fields)
        if kind == "tag":
            return self._tag(node, ctx)
        if kind == "phrase":
            return self._phrase(node, ctx, fields)
        saved = self.current
        self.current = node
        self.frames.append([])
        started = _clock()
        try:
            hits = query_exec._eval(node, ctx, fields)
        finally:
            self.current = saved
            children = self.frames.pop()
        elapsed = (_clock() - started) * 1000.0
        if hits is not None:
            record = self._record(node, ctx, hits, elapsed, children)
            if record is not None:
                self.frames[-1].append(record)
        return hits

    def _record(self, node: Node, ctx, hits: dict, elapsed: float, children: list[Record]) -> Record | None:
        kind = node.kind
        count = len(hits)
        if kind == "fields":
            if not children:
                return None
            inner = children[-1]
            inner.node = node
            return inner
        if kind == "and":
            by_node = {id(r.node): r for r in children}
            required, optional = [], []
            for child in node.children:
                if child.kind == "opt":
                    inner = by_node.get(id(child.children[0]))
                    if inner is not None:
                        optional.append(Record("OPTIONAL", count, inner.time, children=[inner], single=True,
                                               node=child))
                else:
                    record = by_node.get(id(child))
                    if record is not None:
                        required.append(record)
            required.sort(key=lambda r: r.counter)  # the order ``_and`` intersects them in
            kids = required + optional
            if len(kids) == 1 and not optional:
                kids[0].time = elapsed
                kids[0].node = node
                return kids[0]
            return Record("INTERSECT", count, elapsed, children=kids, node=node)
        if kind == "or":
            children = [c for c in children if c.type != "EMPTY"]  # RediSearch drops an empty reader from a union
            if not children:
                return Record("EMPTY", 0, elapsed, node=node)
            if len(children) == 1:
                children[0].node = node
                return children[0]
            return Record("UNION", count, elapsed, query_type="UNION", children=children, node=node)
        if kind in ("not", "opt"):
            inner = children[-1] if children else Record("EMPTY", 0)
            return Record("NOT" if kind == "not" else "OPTIONAL", count, elapsed, children=[inner], single=True,
                          node=node)
        if kind == "all":
            return Record("WILDCARD", count, elapsed, node=node)
        if kind == "none":
            return Record("EMPTY", 0, elapsed, node=node)
        if kind == "numeric":
            return self._numeric(node, ctx, count, elapsed)
        if kind == "geo":
            lon, lat, radius = node.value
            return Record("GEO", count, elapsed, term=f"{lon:g},{lat:g} - {radius:g} m", size=count, node=node)
        if kind == "vrange":
            return Record("VECTOR", count, elapsed, node=node)
        if kind == "geoshape":
            return Record("GEOSHAPE", count, elapsed, node=node)
        if kind == "missing":
            return Record("MISSING", count, elapsed, term=node.fields[0], size=count, node=node)  # type: ignore[index]
        return Record(kind.upper(), count, elapsed, node=node)

    def _numeric(self, node: Node, ctx, count: int, elapsed: float) -> Record:
        """A numeric range: ``Term`` the least and greatest value it read, ``Size`` the values
        (one a document and value) of the field's sorted array inside the range."""
        lo, hi, lo_ex, hi_ex = node.value
        spec = ctx.index.definition.field(node.fields[0])  # type: ignore[index]
        numeric = ctx.index.numerics.get(spec.name) if spec is not None else None
        term, size = f"{lo:g} - {hi:g}", 0
        if numeric is not None:
            vals, _ = numeric._arrays()
            start = int(np.searchsorted(vals, lo, side="right" if lo_ex else "left"))
            stop = int(np.searchsorted(vals, hi, side="left" if hi_ex else "right"))
            size = max(0, stop - start)
            if size:
                term = f"{vals[start]:g} - {vals[stop - 1]:g}"
        return Record("NUMERIC", count, elapsed, term=term, size=size, node=node)

    def _leaf(self, record: Record) -> None:
        self.frames[-1].append(record)

    def _union(self, node: Node, readers: list[Record], started: float, query_type: str, count: int,
               keep_single: bool) -> None:
        elapsed = (_clock() - started) * 1000.0
        if not readers:
            self._leaf(Record("EMPTY", 0, elapsed, node=node))
        elif len(readers) == 1 and not keep_single:
            readers[0].node = node
            readers[0].time = elapsed
            self._leaf(readers[0])
        else:
            self._leaf(Record("UNION", count, elapsed, query_type=query_type, children=readers, node=node))

    def _term(self, node: Node, ctx, fields: list[str] | None) -> Any:
        """A word: one TEXT reader per posting list it reads, as ``query_exec._term`` reads them."""
        started = _clock()
        ctx.budget.tick(query_exec.EVERY_NODE)
        word = node.value
        if query_exec._is_stopword(ctx, word):
            return None
        mask = query_exec._field_mask(ctx, fields)
        postings = ctx.index.text.postings
        names = [] if fields and not mask else query_exec.posting_names(
            ctx, word, not node.attrs.get("exact"), fields, node.attrs.get("phonetic"))
        weight = float(node.attrs.get("weight", 1.0))
        direct = postings.get(word)
        dismax = ctx.scorer == "DISMAX"
        out: dict[int, float] = {}
        readers = []
        for name in names:
            plist = postings[name]
            t0 = _clock()
            part = query_exec.term_lists(ctx, [plist], direct, mask, weight)
            readers.append(Record("TEXT", len(part), (_clock() - t0) * 1000.0, term=name, size=len(plist)))
            for doc, score in part.items():
                out[doc] = max(out.get(doc, 0.0), score) if dismax else out.get(doc, 0.0) + score
        self._union(node, readers, started, "UNION", len(out), False)
        return out

    def _expansion(self, node: Node, ctx, fields: list[str] | None) -> Any:
        """A prefix, suffix, infix, fuzzy or wildcard word: the UNION of the terms it expanded to."""
        started = _clock()
        ctx.budget.tick(query_exec.EVERY_NODE)
        weight = float(node.attrs.get("weight", 1.0))
        out: dict[int, float] = {}
        readers = []
        postings = ctx.index.text.postings
        for term in query_exec.expansion_terms(node, ctx):
            t0 = _clock()
            part = query_exec._term(term, ctx, fields, weight, expand=False)
            readers.append(Record("TEXT", len(part), (_clock() - t0) * 1000.0, term=term, size=len(postings[term])))
            for doc, score in part.items():
                out[doc] = out.get(doc, 0.0) + score
        self._union(node, readers, started, f"{_EXPANSION_TYPES[node.kind]} - {node.value}", len(out), True)
        return out

    def _tag(self, node: Node, ctx) -> Any:
        """A tag set: one TAG reader per tag value it reads."""
        started = _clock()
        ctx.budget.tick(query_exec.EVERY_NODE)
        spec = query_leaves.field_spec(ctx, node, "TAG")
        tags = ctx.index.tags[spec.name]
        found: set[int] = set()
        readers = []
        for how, raw in node.value:
            value = raw if spec.case_sensitive else raw.lower()
            t0 = _clock()
            if how == "exact":
                matched = [(value.strip(), tags.values.get(value.strip(), set()))]
            else:
                matched = [(tag, docs) for tag, docs in tags.values.items() if query_leaves.tag_matches(how, value, tag)]
            for tag, docs in matched:
                if docs:
                    found |= docs
                    readers.append(Record("TAG", len(docs), (_clock() - t0) * 1000.0, term=tag, size=len(docs)))
                    t0 = _clock()
        self._union(node, readers, started, "TAG", len(found), False)
        return dict.fromkeys(found, 0.0)

    def _phrase(self, node: Node, ctx, fields: list[str] | None) -> Any:
        """An exact phrase: the INTERSECT of its words' readers (each word's reader timed by a pass
        of its own over its list; the phrase's time is its evaluation's)."""
        postings = ctx.index.text.postings
        readers = []
        for word in node.value:
            if query_exec._is_stopword(ctx, word) or word not in postings:
                continue
            t0 = _clock()
            part = query_exec._term(word, ctx, fields, 1.0, expand=False)
            readers.append(Record("TEXT", len(part), (_clock() - t0) * 1000.0, term=word, size=len(postings[word])))
        started = _clock()
        saved = self.current
        self.current = node
        try:
            hits = query_exec._eval(node, ctx, fields)
        finally:
            self.current = saved
        elapsed = (_clock() - started) * 1000.0
        readers.sort(key=lambda r: r.counter)
        if len(readers) == 1:
            readers[0].node = node
            self._leaf(readers[0])
        else:
            self._leaf(Record("INTERSECT", len(hits), elapsed, children=readers, node=node))
        return hits

    # -- the result processors -----------------------------------------------------------------

    def stage(self, name: str, counter: int, started: float) -> float:
        """Record a result processor that ran from ``started`` (a ``perf_counter`` reading) until
        now; returns now, the next stage's start."""
        now = _clock()
        self.stages.append(Stage(name, counter, (now - started) * 1000.0))
        return now


    def extend_stage(self, counter: int, started: float) -> float:
        """The last result processor went on from ``started`` until now and ended with ``counter``."""
        now = _clock()
        last = self.stages[-1]
        last.time += (now - started) * 1000.0
        last.counter = counter
        return now


def clock() -> float:
    return _clock()


# -- the reply --------------------------------------------------------------------------------

LIMITED_UNION = "The number of iterators in the union is {n}"


def iterator_reply(record: Record, resp3: bool, with_time: bool, limited: bool) -> Any:
    """One iterator as RediSearch prints it: a map in RESP3, a flat list in RESP2."""
    pairs: list[tuple[bytes, Any]] = [(b"Type", record.type.encode())]
    if record.query_type is not None:
        pairs.append((b"Query type", record.query_type.encode()))
    if record.term is not None:
        pairs.append((b"Term", record.term.encode()))
    if with_time:
        pairs.append((b"Time", record.time))
    pairs.append((b"Counter", record.counter))
    if record.size is not None:
        pairs.append((b"Size", record.size))
    if record.children:
        if record.single:
            pairs.append((b"Child iterator", iterator_reply(record.children[0], resp3, with_time, limited)))
        elif limited and record.type == "UNION" and record.query_type != "UNION":
            pairs.append((b"Child iterators", LIMITED_UNION.format(n=len(record.children)).encode()))
        else:
            kids = [iterator_reply(child, resp3, with_time, limited) for child in record.children]
            if resp3:
                pairs.append((b"Child iterators", kids))
            else:  # RESP2: the children follow the key, one element each
                return _flat(pairs) + [b"Child iterators", *kids]
    return dict(pairs) if resp3 else _flat(pairs)


def _flat(pairs: list[tuple[bytes, Any]]) -> list[Any]:
    out: list[Any] = []
    for key, value in pairs:
        out += [key, value]
    return out


def stage_reply(stage: Stage, resp3: bool, with_time: bool) -> Any:
    pairs: list[tuple[bytes, Any]] = [(b"Type", stage.type.encode())]
    if with_time:
        pairs.append((b"Time", stage.time))
    pairs.append((b"Counter", stage.counter))
    return dict(pairs) if resp3 else _flat(pairs)
