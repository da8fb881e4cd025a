"""One search index: its definition, the documents it holds and the per-field indexes.

Documents get small integer ids in the order they are first indexed (RediSearch's doc ids);
re-indexing a key keeps nothing of its old entry (the old postings, tags, numbers and vectors
are removed first). ``index_key`` is the one entry point for live indexing and for the initial
scan: it reads the stored value through ``documents.extract`` and either indexes the document or
counts the failure, as RediSearch's ``hash_indexing_failures``.
"""

from __future__ import annotations

import time
from typing import Any

from pion.vector import documents, phonetic
from pion.vector.documents import IndexingFailure
from pion.vector.fields import GeoIndex, NumericIndex, TagIndex, TextIndex
from pion.vector.geoshape import GeoShapeIndex
from pion.vector.schema import FieldSpec, IndexDefinition
from pion.vector.text import fold, stem_min_len, stemming_available
from pion.vector.vectors import VectorField


class SearchIndex:
    def __init__(self, definition: IndexDefinition, db_id: int, hidden: bool = False) -> None:
        self.definition = definition
        self.db_id = db_id
        #: a Pion-owned index (agent memory, semantic cache): not in FT._LIST unless asked
        self.hidden = hidden
        self.key_to_doc: dict[bytes, int] = {}
        #: doc id -> key; scores and sortable values live in their own dicts (few objects per
        #: document: a full GC over a 100k-document index is a pause of the event loop)
        self.docs: dict[int, bytes] = {}
        self.doc_scores: dict[int, float] = {}
        self.sortables: dict[str, dict[int, Any]] = {}
        self.next_doc = 1
        self.text = TextIndex()
        #: the engine's FT.CONFIG values (MIN_PHONETIC_TERM_LEN and MINSTEMLEN are read at each document)
        self.config: dict[str, str] = {}
        self.tags: dict[str, TagIndex] = {}
        self.numerics: dict[str, NumericIndex] = {}
        self.geos: dict[str, GeoIndex] = {}
        self.geoshapes: dict[str, GeoShapeIndex] = {}
        self.vectors: dict[str, VectorField] = {}
        self.missing: dict[str, set[int]] = {}
        self.empty: dict[str, set[int]] = {}
        self.text_numbers: dict[str, int] = {}
        self.failures = 0
        self.last_failure = "N/A"
        self.last_failure_key: bytes = b"N/A"
        self.field_failures: dict[str, tuple[int, str, bytes]] = {}
        self.indexing = False
        self.scan_total = 0
        self.scan_done = 0
        self.indexing_time = 0.0
        self.uses = 0
        self.admin_ops = 0
        self.dialects = [0, 0, 0, 0]
        self.filter = None
        #: last search or write, for TEMPORARY indexes (dropped after that many idle seconds)
        self.touched = time.monotonic()
        #: synonym groups (FT.SYNUPDATE): term -> group ids; indexed as "~group" terms
        self.synonyms: dict[str, set[str]] = {}
        #: FT.SEARCH KNN plans (``knn_fast``): argv without its blob -> plan; (query text, argc) ->
        #: where the blob is. Cleared when the schema changes (FT.ALTER) and at close (FT.DROPINDEX)
        self.knn_plans: dict[tuple, Any] = {}
        self.knn_blob_pos: dict[tuple, int] = {}
        self._setup_fields(definition.fields)

    def _setup_fields(self, specs: list[FieldSpec]) -> None:
        for spec in specs:
            if spec.type == "TEXT":
                self.text_numbers[spec.name] = len(self.text_numbers)
            elif spec.type == "TAG":
                self.tags[spec.name] = TagIndex()
            elif spec.type == "NUMERIC":
                self.numerics[spec.name] = NumericIndex()
            elif spec.type == "GEO":
                self.geos[spec.name] = GeoIndex()
            elif spec.type == "GEOSHAPE":
                self.geoshapes[spec.name] = GeoShapeIndex(spec.coord_system)
            elif spec.type == "VECTOR":
                self.vectors[spec.name] = VectorField(spec.vector)  # type: ignore[arg-type]
            if spec.index_missing:
                self.missing[spec.name] = set()
            if spec.index_empty:
                self.empty[spec.name] = set()

    def update_synonyms(self, group: str, terms: list[str]) -> None:
        for term in terms:
            self.synonyms.setdefault(fold(term), set()).add(group)

    def synonym_groups(self) -> dict[str, list[str]]:
        return {term: sorted(groups) for term, groups in self.synonyms.items()}

    def add_fields(self, specs: list[FieldSpec]) -> None:
        """FT.ALTER ... SCHEMA ADD: the definition grows; existing documents are re-indexed by the caller."""
        self.definition.fields.extend(specs)
        self._setup_fields(specs)
        self.forget_plans()

    def forget_plans(self) -> None:
        """Drop the cached query plans (the schema changed, or the index is going away)."""
        self.knn_plans.clear()
        self.knn_blob_pos.clear()

    @property
    def name(self) -> str:
        return self.definition.name

    def __len__(self) -> int:
        return len(self.docs)

    # -- writes ---------------------------------------------------------------------------------

    def index_key(self, key: bytes, value: Any) -> None:
        """Index (or re-index, or drop) ``key`` given its current value (None: deleted)."""
        started = time.perf_counter()
        self.touched = time.monotonic()
        try:
            self.remove_key(key)
            if value is None or not documents.key_matches_type(self.definition, value):
                return
            try:
                doc = documents.extract(self.definition, value)
                if self.filter is not None and not self.filter(key, value):
                    return
            except IndexingFailure as exc:
                self._failed(key, str(exc))
                return
            self._add(key, doc)
            for name, reason in doc.field_errors:
                self._failed(key, reason)
                count = self.field_failures.get(name, (0, "", b""))[0]
                self.field_failures[name] = (count + 1, reason, key)
        finally:
            self.indexing_time += time.perf_counter() - started

    def _failed(self, key: bytes, reason: str) -> None:
        self.failures += 1
        self.last_failure = reason
        self.last_failure_key = key

    def _add(self, key: bytes, doc: documents.Doc) -> None:
        doc_id = self.next_doc
        self.next_doc += 1
        vector_done: list[str] = []
        try:
            for name, rows in doc.vectors.items():
                self.vectors[name].put(doc_id, rows, key)
                vector_done.append(name)
        except Exception:
            for name in vector_done:
                self.vectors[name].remove(doc_id)
            raise
        self.key_to_doc[key] = doc_id
        self.docs[doc_id] = key
        if doc.score != 1.0:
            self.doc_scores[doc_id] = doc.score
        for name, value in doc.sortables.items():
            self.sortables.setdefault(name, {})[doc_id] = value
        definition = self.definition
        text_fields = []
        empty_weight = 0.0
        min_stem_len = stem_min_len(self.config)
        for name, values in doc.texts.items():
            spec = definition.field(name)
            if spec is None or spec.noindex:
                continue
            stem = min_stem_len if not spec.nostem and stemming_available(doc.language) else 0
            sounds = phonetic.min_len(self.config) if spec.phonetic else 0
            text_fields.append((self.text_numbers[name], spec.weight, values, stem, sounds))
            if name in self.empty and any(not v.strip() for v in values):
                self.empty[name].add(doc_id)
                empty_weight += spec.weight
        if text_fields:
            self.text.add(doc_id, text_fields, definition.stopword_set, doc.language, self.synonyms)
            if empty_weight:
                # RediSearch indexes an empty value (INDEXEMPTY) as a term of its own: it counts in
                # the document's length (BM25's len / average), as a word of the field would
                self.text.doc_len[doc_id] = self.text.doc_len.get(doc_id, 0) + empty_weight
                self.text.total_len += empty_weight
            # RediSearch 2.10 counted a document's vector into its highest term frequency (TFIDF's
            # norm); Redis 8.4 does not (redis-py 8.1's FT.HYBRID TFIDF scores show it), nor does Pion
        else:
            self.text.doc_len[doc_id] = 0
        # a NOINDEX field is kept for SORTBY and LOAD only: no query and no FT.TAGVALS sees it
        noindex = {f.name for f in definition.fields if f.noindex}
        for name, tags in doc.tags.items():
            if name in self.tags and name not in noindex:
                self.tags[name].add(doc_id, tags)
                if name in self.empty and "" in tags:
                    self.empty[name].add(doc_id)
        for name, values in doc.numerics.items():
            if name in self.numerics and name not in noindex:
                self.numerics[name].add(doc_id, values)
        for name, points in doc.geos.items():
            if name in self.geos and name not in noindex:
                self.geos[name].add(doc_id, points)
        for name, shape in doc.geoshapes.items():
            if name in self.geoshapes and name not in noindex:
                self.geoshapes[name].add(doc_id, shape)
        for name in doc.missing:
            if name in self.missing:
                self.missing[name].add(doc_id)

    def remove_key(self, key: bytes) -> bool:
        doc_id = self.key_to_doc.pop(key, None)
        if doc_id is None:
            return False
        self.docs.pop(doc_id, None)
        self.doc_scores.pop(doc_id, None)
        for values in self.sortables.values():
            values.pop(doc_id, None)
        self.text.remove(doc_id)
        self.text.doc_len.pop(doc_id, None)
        for group in (self.tags, self.numerics, self.geos, self.geoshapes, self.vectors):
            for idx in group.values():
                idx.remove(doc_id)
        for bucket in (*self.missing.values(), *self.empty.values()):
            bucket.discard(doc_id)
        return True

    def clear(self) -> None:
        for key in list(self.key_to_doc):
            self.remove_key(key)

    def close(self) -> None:
        self.forget_plans()
        for vec in self.vectors.values():
            vec.close()

    def scan_finished(self) -> None:
        """The (re)build scan saw every key: saved graph entries nobody claimed are dropped."""
        for vec in self.vectors.values():
            vec.finish_restore()

    # -- reads ----------------------------------------------------------------------------------

    def score_of(self, doc_id: int) -> float:
        return self.doc_scores.get(doc_id, 1.0)

    def sortable(self, name: str, doc_id: int) -> Any:
        values = self.sortables.get(name)
        return None if values is None else values.get(doc_id)

    def all_docs(self) -> set[int]:
        return set(self.docs)

    @property
    def avg_doc_len(self) -> float:
        n = len(self.docs)
        return self.text.total_len / n if n else 0.0

    def memory_bytes(self) -> int:
        total = len(self.docs) * 200 + self.text.memory_bytes()
        for group in (self.tags, self.numerics, self.geos, self.geoshapes, self.vectors):
            for idx in group.values():
                total += idx.memory_bytes()
        return total

    def vector_bytes(self) -> int:
        return sum(v.memory_bytes() for v in self.vectors.values())
