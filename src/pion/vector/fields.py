"""The per-field indexes of a search index: text postings, tags, numbers and geo points.

Why our own inverted index rather than bm25s: bm25s builds an immutable sparse matrix, and every
HSET/DEL must change the index at once (live indexing). A dict of postings updates in O(tokens)
per document and still scores BM25 exactly (RediSearch's formulas, in ``scoring``).

The text index is shared by all TEXT fields of an index; a posting records the document's
weighted frequency (RediSearch adds the field weight per occurrence), a bit mask of the fields
the term appears in, and token positions (field number * 2**20 + offset) for phrases and slop; the
offset counts the document's non-stop-word tokens across its fields, as RediSearch's does.
Numeric and geo fields keep doc -> values and build sorted numpy arrays lazily for range scans.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np

from pion.vector import chinese, phonetic, text

FIELD_SHIFT = 1 << 20
SYNONYM_PREFIX = "~"
#: the offset gap between two values of a multi-value (JSON array) TEXT field, RediSearch's MULTI_TEXT_SLOP
MULTI_TEXT_SLOP = 100


class Posting:
    __slots__ = ("freq", "mask", "positions")

    def __init__(self) -> None:
        self.freq = 0
        self.mask = 0
        self.positions: list[int] = []


class TextIndex:
    def __init__(self) -> None:
        self.postings: dict[str, dict[int, Posting]] = {}
        self.doc_terms: dict[int, list[str]] = {}
        self.doc_len: dict[int, int] = {}
        self.max_freq: dict[int, int] = {}
        self.total_len = 0
        self.records = 0

    def add(self, doc_id: int, fields: list[tuple[int, float, list[str], int, int]], stopwords: frozenset[str],
            language: str, synonyms: dict[str, set[str]] | None = None) -> None:
        """``fields``: (field number, weight, texts, the minimum length of a word to stem or 0 (no
        stemming), phonetic minimum length or 0) for each TEXT
        field the doc has; a phonetic field's long enough tokens also index their code (``phonetic``)."""
        terms: dict[str, Posting] = {}
        total = 0
        position = 0  # the document's offset, as RediSearch's: it runs on across fields (TFIDF's slop)
        for number, weight, texts, do_stem, phonetic_len in fields:
            inc = max(1, int(weight))
            for n, value in enumerate(texts):
                if n:
                    position += MULTI_TEXT_SLOP  # no phrase across two values of a multi-value field
                sound = None
                for token in (chinese.tokenize(value) if language == chinese.LANGUAGE else text.tokenize(value)):
                    if token in stopwords:  # a stop-word takes no position: "king for henry" is "king henry"
                        continue
                    position += 1
                    where = number * FIELD_SHIFT + position
                    _bump(terms, token, number, inc, where)
                    total += inc
                    if do_stem:
                        root = text.stem(token, language, do_stem)
                        if root is not None:
                            _bump(terms, text.STEM_PREFIX + root, number, inc, where)
                    if phonetic_len:
                        if len(token.encode()) >= phonetic_len:  # RediSearch counts bytes
                            sound = phonetic.code(token)
                        # a shorter token re-indexes the code before it in the value (RediSearch 2.10.5
                        # keeps the last code in its tokenizer: "Jon x y z" holds <JN 4 times)
                        if sound is not None:
                            _bump(terms, sound, number, inc, where)
                    if synonyms and token in synonyms:
                        for group in synonyms[token]:
                            _bump(terms, SYNONYM_PREFIX + group, number, inc, where)
        if not terms:
            self.doc_len[doc_id] = total
            return
        postings = self.postings
        for term, posting in terms.items():
            bucket = postings.get(term)
            if bucket is None:
                bucket = postings[term] = {}
            bucket[doc_id] = posting
        self.doc_terms[doc_id] = list(terms)
        self.doc_len[doc_id] = total
        self.max_freq[doc_id] = max(p.freq for p in terms.values())
        self.total_len += total
        self.records += len(terms)

    def remove(self, doc_id: int) -> None:
        for term in self.doc_terms.pop(doc_id, ()):
            bucket = self.postings.get(term)
            if bucket is not None:
                bucket.pop(doc_id, None)
                self.records -= 1
                if not bucket:
                    del self.postings[term]
        self.total_len -= self.doc_len.pop(doc_id, 0)
        self.max_freq.pop(doc_id, None)

    def terms_matching(self, predicate, limit: int = 200) -> list[str]:
        out = []
        for term in self.postings:
            if term[:1] not in (text.STEM_PREFIX, SYNONYM_PREFIX, phonetic.PREFIX) and predicate(term):
                out.append(term)
                if len(out) >= limit:
                    break
        return out

    def memory_bytes(self) -> int:
        return self.records * 120 + len(self.postings) * 100


def _bump(terms: dict[str, Posting], term: str, number: int, inc: int, where: int) -> None:
    posting = terms.get(term)
    if posting is None:
        posting = terms[term] = Posting()
    posting.freq += inc
    posting.mask |= 1 << number
    posting.positions.append(where)


class TagIndex:
    def __init__(self) -> None:
        self.values: dict[str, set[int]] = {}
        self.doc_values: dict[int, str | tuple[str, ...]] = {}
        #: tag -> its documents as a sorted int64 array, built on first use and dropped when the
        #: tag's set changes: a KNN prefilter takes it as it is (no per-document Python work)
        self._arrays: dict[str, np.ndarray] = {}

    def add(self, doc_id: int, tags: Iterable[str]) -> None:
        tags = tuple(dict.fromkeys(tags))
        arrays = self._arrays
        for tag in tags:
            self.values.setdefault(tag, set()).add(doc_id)
            if arrays:
                arrays.pop(tag, None)
        self.doc_values[doc_id] = tags[0] if len(tags) == 1 else tags  # one tag: no tuple object

    def ids(self, tag: str) -> np.ndarray:
        """The documents carrying ``tag``, a sorted int64 array (shared: callers must not change it)."""
        found = self._arrays.get(tag)
        if found is None:
            docs = self.values.get(tag)
            if not docs:
                return _NO_IDS
            found = np.fromiter(docs, dtype=np.int64, count=len(docs))
            found.sort()
            found.flags.writeable = False
            self._arrays[tag] = found
        return found

    def remove(self, doc_id: int) -> None:
        tags = self.doc_values.pop(doc_id, ())
        arrays = self._arrays
        for tag in (tags,) if tags.__class__ is str else tags:
            if arrays:
                arrays.pop(tag, None)
            docs = self.values.get(tag)
            if docs is not None:
                docs.discard(doc_id)
                if not docs:
                    del self.values[tag]

    def memory_bytes(self) -> int:
        return sum(len(d) for d in self.values.values()) * 40 + len(self.values) * 100


class NumericIndex:
    def __init__(self) -> None:
        self.doc_values: dict[int, float | tuple[float, ...]] = {}
        self._sorted: tuple[np.ndarray, np.ndarray] | None = None

    def add(self, doc_id: int, values: list[float]) -> None:
        self.doc_values[doc_id] = values[0] if len(values) == 1 else tuple(values)
        self._sorted = None

    def values_of(self, doc_id: int) -> tuple[float, ...]:
        value = self.doc_values.get(doc_id)
        if value is None:
            return ()
        return (value,) if value.__class__ is float else value

    def remove(self, doc_id: int) -> None:
        if self.doc_values.pop(doc_id, None) is not None:
            self._sorted = None

    def _arrays(self) -> tuple[np.ndarray, np.ndarray]:
        if self._sorted is None:
            docs: list[int] = []
            vals: list[float] = []
            for doc, values in self.doc_values.items():
                for value in (values,) if values.__class__ is float else values:
                    docs.append(doc)
                    vals.append(value)
            v = np.asarray(vals, dtype=np.float64)
            d = np.asarray(docs, dtype=np.int64)
            order = np.argsort(v, kind="stable")
            self._sorted = (v[order], d[order])
        return self._sorted

    def range(self, low: float, high: float, low_excl: bool, high_excl: bool) -> set[int]:
        vals, docs = self._arrays()
        lo = np.searchsorted(vals, low, side="right" if low_excl else "left")
        hi = np.searchsorted(vals, high, side="left" if high_excl else "right")
        if hi <= lo:
            return set()
        return set(docs[lo:hi].tolist())

    def range_ids(self, low: float, high: float, low_excl: bool, high_excl: bool) -> np.ndarray:
        """``range`` as a sorted int64 array of unique doc ids (numpy only: a KNN prefilter)."""
        vals, docs = self._arrays()
        lo = np.searchsorted(vals, low, side="right" if low_excl else "left")
        hi = np.searchsorted(vals, high, side="left" if high_excl else "right")
        if hi <= lo:
            return _NO_IDS
        found = np.sort(docs[lo:hi])
        if len(self.doc_values) != len(vals):  # multi-value documents: one entry per document
            found = np.unique(found)
        return found

    def memory_bytes(self) -> int:
        return len(self.doc_values) * 80


_NO_IDS = np.zeros(0, dtype=np.int64)
_NO_IDS.flags.writeable = False

EARTH_RADIUS_M = 6372797.560856  # Redis's geohash radius
UNITS = {"m": 1.0, "km": 1000.0, "mi": 1609.34, "ft": 0.3048}


class GeoIndex:
    def __init__(self) -> None:
        self.doc_values: dict[int, list[tuple[float, float]]] = {}
        self._arrays: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None

    def add(self, doc_id: int, points: list[tuple[float, float]]) -> None:
        self.doc_values[doc_id] = points
        self._arrays = None

    def remove(self, doc_id: int) -> None:
        if self.doc_values.pop(doc_id, None) is not None:
            self._arrays = None

    def within(self, lon: float, lat: float, radius_m: float) -> set[int]:
        if self._arrays is None:
            docs, lons, lats = [], [], []
            for doc, points in self.doc_values.items():
                for plon, plat in points:
                    docs.append(doc)
                    lons.append(plon)
                    lats.append(plat)
            self._arrays = (np.asarray(docs, dtype=np.int64), np.radians(lons), np.radians(lats))
        docs, lons, lats = self._arrays
        if len(docs) == 0:
            return set()
        dist = haversine(math.radians(lon), math.radians(lat), lons, lats)
        return set(docs[dist <= radius_m].tolist())

    def memory_bytes(self) -> int:
        return len(self.doc_values) * 80


def haversine(lon1: float, lat1: float, lons: np.ndarray, lats: np.ndarray) -> np.ndarray:
    """Great-circle distance in meters (radians in), Redis's formula."""
    u = np.sin((lats - lat1) / 2)
    v = np.sin((lons - lon1) / 2)
    a = u * u + math.cos(lat1) * np.cos(lats) * v * v
    return 2.0 * EARTH_RADIUS_M * np.arcsin(np.sqrt(np.minimum(a, 1.0)))
