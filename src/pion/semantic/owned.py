"""Pion-owned indexes: one per database and feature, recreated from a marker key after a restart.

Each feature (semantic cache, agent memory) keeps its documents as hashes under a reserved key
prefix and its index under a reserved name (``__pion:...``, hidden from FT._LIST, so it never
collides with or displaces a user's index). A marker hash (``META_KEY``) in the same database
records the vectors' width and the model that made them: its presence tells a restarted server
to recreate the index (the log holds the documents' HSETs, not the index definition), and its
width is what a later request is checked against, so a server started with another model gets
a clear error instead of an empty result.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from pion.vector.engine import SearchEngine
from pion.vector.index import SearchIndex


class DimensionMismatch(ValueError):
    """The index's vectors and the server's embedding model disagree on the width."""


@dataclass(frozen=True)
class OwnedIndex:
    """A feature's reserved names and its index definition (as FT.CREATE argv for a width)."""

    name: str
    prefix: bytes
    meta_key: bytes
    create_argv: Callable[[int], list[bytes]]
    what: str  # "the semantic cache", "agent memory": for error texts

    def find(self, engine: SearchEngine, db: Any) -> SearchIndex | None:
        return engine.resolve(db.id, self.name)

    def current(self, engine: SearchEngine, db: Any) -> SearchIndex | None:
        """The index, if this database has one, with every write so far indexed (reads and
        deletes never create it)."""
        engine.catch_up()
        index = self.find(engine, db)
        if index is not None and engine.scanning(index):
            engine.complete_scan(index)
        return index

    def width(self, index: SearchIndex) -> int:
        return int(index.vectors["v"].params.dim)

    def ensure(self, engine: SearchEngine, db: Any, dim: int, model: str) -> tuple[SearchIndex, list[list[bytes]]]:
        """The index for vectors of width ``dim`` (created if missing), and the marker write to log
        if the marker is missing. Raises ``DimensionMismatch`` when the index holds another width."""
        engine.catch_up()  # a rebuild due after a restart starts here
        index = self.find(engine, db)
        if index is None:
            index = engine.create(db, self.create_argv(dim), hidden=True)
        elif self.width(index) != dim:
            raise DimensionMismatch(mismatch_text(self.what, self.width(index), dim, model))
        if engine.scanning(index):
            engine.complete_scan(index)  # never answer from a half-rebuilt index (after a restart)
        engine.catch_up()
        writes = []
        if db.data.get(self.meta_key) is None:
            writes.append([b"HSET", self.meta_key, b"dim", str(dim).encode(), b"model", model.encode()])
        return index, writes

    def recreate(self, engine: SearchEngine, db: Any, values: Callable[[Any, bytes], Any]) -> bool:
        """At start: the marker says this database had the feature; make its index again."""
        meta = values(db, self.meta_key)
        fields = getattr(meta, "fields", None)
        if not fields or self.find(engine, db) is not None:
            return False
        try:
            dim = int(fields.get(b"dim", b"0"))
        except ValueError:
            return False
        if dim <= 0:
            return False
        engine.create(db, self.create_argv(dim), hidden=True)
        return True


def mismatch_text(what: str, index_dim: int, model_dim: int, model: str) -> str:
    return (f"{what} of this database holds {index_dim}-dim vectors but this server's embedding model "
            f"({model}) makes {model_dim}-dim ones: start the server with the model they were made with, "
            f"or delete them and start again")


def vector_blob(vector: np.ndarray) -> bytes:
    return np.asarray(vector, dtype="<f4").tobytes()


def field_text(fields: dict, name: bytes, default: str = "") -> str:
    raw = fields.get(name)
    return default if raw is None else bytes(raw).decode("utf-8", "replace")


def field_int(fields: dict, name: bytes, default: int = 0) -> int:
    raw = fields.get(name)
    try:
        return int(float(bytes(raw))) if raw is not None else default
    except ValueError:
        return default


def allowed_docs(index: SearchIndex, tag_filters: list[tuple[str, list[str], bool]]) -> np.ndarray | None:
    """Sorted doc ids matching every ``(tag field, values, all_of)`` filter (None: no filter).

    ``all_of`` False: a document with any of the values matches; True: it must carry them all."""
    chosen: set[int] | None = None
    for name, wanted, all_of in tag_filters:
        tags = index.tags[name].values
        sets = [tags.get(value, set()) for value in wanted]
        matched = set.intersection(*sets) if all_of else set().union(*sets)
        chosen = matched if chosen is None else chosen & matched
        if not chosen:
            return np.zeros(0, dtype=np.int64)
    if chosen is None:
        return None
    return np.fromiter(sorted(chosen), dtype=np.int64, count=len(chosen))


def nearest(index: SearchIndex, query: np.ndarray, k: int, allowed: np.ndarray | None) -> list[tuple[int, float]]:
    """(doc id, cosine similarity) of the ``k`` nearest documents, most similar first (exact scan
    of the FLAT field; ``allowed`` narrows it). Similarity is ``1 - COSINE distance``."""
    if allowed is not None and not len(allowed):
        return []
    field = index.vectors["v"]
    ids, dists = field.plan_knn(np.asarray(query, dtype=np.float32), k, allowed, None, None)()
    return [(int(d), similarity(float(x))) for d, x in zip(ids.tolist(), dists.tolist(), strict=True) if d in index.docs]


def similarity(cosine_distance: float) -> float:
    """The one conversion: RediSearch's COSINE distance is ``1 - cos``, so ``cos = 1 - distance``,
    rounded to 6 decimals: the value replies show is the value thresholds compare (a text found
    again exactly scores 1.0, not 0.99999994)."""
    return round(1.0 - cosine_distance, 6)
