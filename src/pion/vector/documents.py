"""Reading a stored value as an index sees it: one ``Doc`` per key, per index definition.

HASH documents take each schema field from the hash field of that name; JSON documents evaluate
the field's JSONPath (every match: JSON arrays give multi-value TAG/TEXT/NUMERIC/GEO fields and
multi-vector fields). A value that cannot be indexed (a NUMERIC that is no number, a vector blob
of the wrong size) makes the whole document fail, as in RediSearch: it is left out of the index
and counted in ``hash_indexing_failures`` with the reason.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pion.storage.hash_value import HashValue
from pion.storage.json_path import JsonPathError, Path
from pion.storage.json_value import JsonValue, dumps
from pion.vector import geoshape
from pion.vector.schema import FieldSpec, IndexDefinition
from pion.vector.text import fold

try:  # bfloat16 blobs (BFLOAT16 vector fields)
    from ml_dtypes import bfloat16 as _BF16
except ImportError:  # pragma: no cover - ml_dtypes is a core dependency
    _BF16 = None

NUMPY_TYPES = {"FLOAT32": np.float32, "FLOAT64": np.float64, "FLOAT16": np.float16,
               "BFLOAT16": _BF16, "INT8": np.int8, "UINT8": np.uint8}


class IndexingFailure(ValueError):
    """A document that cannot be indexed; the message is what FT.INFO's ``Index Errors`` shows."""


@dataclass
class Doc:
    texts: dict[str, list[str]] = field(default_factory=dict)
    tags: dict[str, list[str]] = field(default_factory=dict)
    numerics: dict[str, list[float]] = field(default_factory=dict)
    geos: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    geoshapes: dict[str, Any] = field(default_factory=dict)  # a shapely geometry per GEOSHAPE field
    #: (field, reason) of a field that failed but did not keep the document out (a bad GEOSHAPE WKT)
    field_errors: list[tuple[str, str]] = field(default_factory=list)
    vectors: dict[str, np.ndarray] = field(default_factory=dict)  # (n, dim) float32 rows
    missing: set[str] = field(default_factory=set)
    sortables: dict[str, Any] = field(default_factory=dict)
    score: float = 1.0
    language: str = "english"


def key_matches_type(definition: IndexDefinition, value: Any) -> bool:
    if definition.key_type == "HASH":
        return value.__class__ is HashValue
    return value.__class__ is JsonValue


def extract(definition: IndexDefinition, value: Any) -> Doc:
    """The document a stored value makes for this definition (raises ``IndexingFailure``)."""
    doc = Doc(score=definition.score, language=definition.language)
    if value.__class__ is HashValue:
        fields = value.fields
        for spec in definition.fields:
            raw = fields.get(spec.identifier.encode())
            if raw is None:
                doc.missing.add(spec.name)
                continue
            _add_hash_value(doc, spec, bytes(raw))
        _hash_doc_options(definition, fields, doc)
    else:
        root = value.root
        for spec in definition.fields:
            found = _json_values(root, spec.identifier)
            if not found:
                doc.missing.add(spec.name)
                continue
            _add_json_values(doc, spec, found)
        _json_doc_options(definition, root, doc)
    return doc


def _hash_doc_options(definition: IndexDefinition, fields: dict[bytes, bytes], doc: Doc) -> None:
    if definition.score_field:
        raw = fields.get(definition.score_field.encode())
        if raw is not None:
            try:
                doc.score = float(raw)
            except ValueError:
                pass
    if definition.language_field:
        raw = fields.get(definition.language_field.encode())
        if raw is not None:
            doc.language = raw.decode("utf-8", "replace").lower()


def _json_doc_options(definition: IndexDefinition, root: Any, doc: Doc) -> None:
    if definition.score_field:
        found = _json_values(root, definition.score_field)
        if found and isinstance(found[0], (int, float)):
            doc.score = float(found[0])
    if definition.language_field:
        found = _json_values(root, definition.language_field)
        if found and isinstance(found[0], str):
            doc.language = found[0].lower()


def _json_values(root: Any, identifier: str) -> list[Any]:
    try:
        return Path(identifier).compile().values(root)
    except JsonPathError:
        return []


# -- HASH ---------------------------------------------------------------------------------------


def _add_hash_value(doc: Doc, spec: FieldSpec, raw: bytes) -> None:
    kind = spec.type
    name = spec.name
    if kind == "VECTOR":
        doc.vectors[name] = parse_vector_blob(spec, raw)
        return
    textual = raw.decode("utf-8", "replace")
    if kind == "TEXT":
        doc.texts[name] = [textual]
        if spec.sortable:
            doc.sortables[name] = textual if spec.unf else textual.lower()
    elif kind == "TAG":
        doc.tags[name] = split_tags(spec, textual)
        if spec.sortable:
            doc.sortables[name] = textual if spec.unf else textual.lower()
    elif kind == "NUMERIC":
        number = parse_number(textual)
        doc.numerics[name] = [number]
        if spec.sortable:
            doc.sortables[name] = number
    elif kind == "GEO":
        doc.geos[name] = [parse_geo(textual)]
        if spec.sortable:
            doc.sortables[name] = textual
    elif kind == "GEOSHAPE":
        _geoshape_into(doc, name, textual)
        if spec.sortable:
            doc.sortables[name] = textual


def split_tags(spec: FieldSpec, textual: str) -> list[str]:
    tags = []
    for part in textual.split(spec.separator):
        tag = part.strip()
        if not tag and not spec.index_empty:
            continue
        tags.append(tag if spec.case_sensitive else fold(tag))
    return tags


def parse_number(textual: str) -> float:
    try:
        number = float(textual)
    except ValueError:
        raise IndexingFailure(f"Invalid numeric value: '{textual}'") from None
    if math.isnan(number):
        raise IndexingFailure(f"Invalid numeric value: '{textual}'")
    return number


def parse_geo(textual: str) -> tuple[float, float]:
    parts = textual.replace(",", " ").split()
    if len(parts) != 2:
        raise IndexingFailure('Invalid lon/lat format. Use "lon lat" or "lon,lat"')
    try:
        lon, lat = float(parts[0]), float(parts[1])
    except ValueError:
        raise IndexingFailure('Invalid lon/lat format. Use "lon lat" or "lon,lat"') from None
    if not (-180.0 <= lon <= 180.0 and -85.05112878 <= lat <= 85.05112878):
        raise IndexingFailure("Invalid geo coordinates")
    return lon, lat


def parse_vector_blob(spec: FieldSpec, raw: bytes) -> np.ndarray:
    """A blob of DIM values of the field's TYPE, little-endian, as one float32 row."""
    params = spec.vector
    assert params is not None
    if len(raw) != params.blob_size:
        raise IndexingFailure(
            f"Could not add vector with blob size {len(raw)} (expected size {params.blob_size})")
    dtype = NUMPY_TYPES[params.data_type]
    row = np.frombuffer(raw, dtype=dtype).astype(np.float32)
    if not np.all(np.isfinite(row)):
        raise IndexingFailure("Invalid vector: contains NaN or infinite values")
    return row.reshape(1, -1)


# -- JSON ---------------------------------------------------------------------------------------


def _flatten(found: list[Any]) -> list[Any]:
    out: list[Any] = []
    for value in found:
        if isinstance(value, list):
            out.extend(value)
        else:
            out.append(value)
    return out


def _add_json_values(doc: Doc, spec: FieldSpec, found: list[Any]) -> None:
    kind = spec.type
    name = spec.name
    if kind == "VECTOR":
        doc.vectors[name] = _json_vectors(spec, found)
        return
    values = [v for v in _flatten(found) if v is not None]
    if not values:
        doc.missing.add(name)
        return
    if kind == "TEXT":
        if not all(isinstance(v, str) for v in values):
            raise IndexingFailure(f"Invalid JSON type: TEXT field {spec.identifier} expects a string")
        doc.texts[name] = values
        if spec.sortable:
            doc.sortables[name] = values[0] if spec.unf else values[0].lower()
    elif kind == "TAG":
        tags = []
        for v in values:
            if isinstance(v, bool):
                v = "true" if v else "false"
            elif isinstance(v, (int, float)):
                v = dumps(v)
            elif not isinstance(v, str):
                raise IndexingFailure(f"Invalid JSON type: TAG field {spec.identifier} expects a string")
            tags.extend(split_tags(spec, v) if len(values) == 1 and spec.separator in v else
                        [v.strip() if spec.case_sensitive else fold(v.strip())])
        doc.tags[name] = tags
        if spec.sortable:
            doc.sortables[name] = tags[0] if tags else ""
    elif kind == "NUMERIC":
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
            raise IndexingFailure(f"Invalid JSON type: NUMERIC field {spec.identifier} expects a number")
        doc.numerics[name] = [float(v) for v in values]
        if spec.sortable:
            doc.sortables[name] = float(values[0])
    elif kind == "GEO":
        doc.geos[name] = [parse_geo(v) if isinstance(v, str) else _bad_geo() for v in values]
    elif kind == "GEOSHAPE":
        if len(values) == 1 and isinstance(values[0], (int, float)) and not isinstance(values[0], bool):
            raise IndexingFailure("Invalid JSON type: Numeric type can represent only NUMERIC field")
        if len(values) != 1 or not isinstance(values[0], str):
            raise IndexingFailure("Invalid JSON type: GEOSHAPE field expects a WKT string")
        _geoshape_into(doc, name, values[0])
        if spec.sortable:
            doc.sortables[name] = values[0]


def _geoshape_into(doc: Doc, name: str, text: str) -> None:
    """A GEOSHAPE field's WKT as a shape. A text RediSearch's reader refuses is an indexing failure
    of the field only: the document stays in the index without it (as RediSearch keeps it)."""
    try:
        doc.geoshapes[name] = geoshape.parse_wkt(text)
    except geoshape.GeometryError as exc:
        doc.field_errors.append((name, f"Error indexing geoshape: {exc}"))


def _bad_geo() -> tuple[float, float]:
    raise IndexingFailure("Invalid JSON type: GEO field expects a string")


def _json_vectors(spec: FieldSpec, found: list[Any]) -> np.ndarray:
    params = spec.vector
    assert params is not None
    rows: list[list[float]] = []
    for value in found:
        if isinstance(value, list) and value and all(isinstance(v, list) for v in value):
            rows.extend(value)
        elif isinstance(value, list):
            rows.append(value)
        else:
            raise IndexingFailure(f"Invalid JSON type: VECTOR field {spec.identifier} expects an array")
    for row in rows:
        if len(row) != params.dim:
            raise IndexingFailure(f"Invalid vector length {len(row)} (expected {params.dim})")
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in row):
            raise IndexingFailure("Invalid vector: elements must be numbers")
    matrix = np.asarray(rows, dtype=np.float32).reshape(len(rows), params.dim)
    if not np.all(np.isfinite(matrix)):
        raise IndexingFailure("Invalid vector: contains NaN or infinite values")
    return matrix
