"""The vector part of a RediSearch query, and the ``=>{$attr: v; ...}`` attribute lists.

``filter=>[KNN k @v $B [EF_RUNTIME n] [HYBRID_POLICY p] [BATCH_SIZE n] [EPSILON e] [SHARD_K_RATIO r]
[SEARCH_WINDOW_SIZE n] [SEARCH_BUFFER_CAPACITY n] [USE_SEARCH_HISTORY OFF|ON|AUTO] [AS d]]`` with
an optional ``=>{$yield_distance_as: d; ...}`` after it: ``split_knn`` finds the arrow that opens
the clause at the top level, ``parse_knn`` reads it into a ``KnnClause``; ``parse_attributes``
reads the attribute lists the parser also meets after any group or term.
SVS-VAMANA's runtime parameters (only in the clause: RediSearch takes no ``$search_window_size``
attribute) land in the graph's one search window (``svs_graph``): SEARCH_WINDOW_SIZE and
SEARCH_BUFFER_CAPACITY set ``ef`` (the larger of the two); USE_SEARCH_HISTORY is checked and kept
(the usearch graph always searches with its window). VecSim's resolver texts:
``Error parsing vector similarity parameters: Invalid value was given`` (not a positive integer,
not ON/OFF/AUTO), ``...: Parameter was specified twice``; which field accepts which parameter is
``VectorField.query_error``'s (``...: Invalid option``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from pion.protocol.errors import ReplyError
from pion.vector import phonetic
from pion.vector.query_lexer import syntax_error


@dataclass
class KnnClause:
    k: int
    field: str
    blob: bytes
    ef: int | None = None
    policy: str | None = None
    batch_size: int | None = None
    alias: str | None = None
    epsilon: float | None = None
    shard_ratio: float | None = None
    #: SVS-VAMANA's runtime parameters the clause names (SEARCH_WINDOW_SIZE -> 20, ...)
    svs: dict[str, Any] | None = None
    #: the clause or its attributes named EF_RUNTIME (an HNSW parameter: refused on SVS-VAMANA)
    ef_runtime: bool = False
    param: str = "BLOB"  # the PARAMS name the query vector came from (FT.EXPLAIN shows it)


SEARCH_HISTORY = ("OFF", "ON", "AUTO")
SVS_QUERY_PARAMS = ("SEARCH_WINDOW_SIZE", "SEARCH_BUFFER_CAPACITY", "USE_SEARCH_HISTORY")
VECSIM_ERROR = "Error parsing vector similarity parameters: "


def split_knn(text: str) -> tuple[str, str | None, int]:
    """Split ``filter=>[KNN ...]...`` at the top-level arrow that opens a vector clause.

    Inside a numeric range ``[...]`` or a tag set ``{...}`` only its own closer counts: the ``(`` of
    an exclusive bound (``@price:[(10 +inf]``, what RedisVL's and LangChain's ``Num(f) > x`` send)
    opens no group. Only the characters that matter are visited (one regex scan jumps to them)."""
    if "=>" not in text:
        return text, None, 0
    opened: list[str] = []
    closer = {"(": ")", "[": "]", "{": "}"}
    quote = None
    skip = 0  # an escaped character: not itself
    for m in _KNN_SCAN.finditer(text):
        i = m.start()
        if i < skip:
            continue
        ch = m.group()
        if quote:
            if ch == "\\":
                skip = i + 2
            elif ch == quote:
                quote = None
        elif ch == "\\":
            skip = i + 2
        elif ch == '"':
            quote = ch
        elif opened and opened[-1] in "[{":
            if ch == closer[opened[-1]]:
                opened.pop()
        elif ch in "([{":
            opened.append(ch)
        elif ch == ")":
            if opened:
                opened.pop()
        elif ch == "=>" and not opened:
            j = i + 2
            while j < len(text) and text[j].isspace():
                j += 1
            if j < len(text) and text[j] == "[":
                return text[:i], text[j:], j
    return text, None, 0


_KNN_SCAN = re.compile(r'[\\"()\[\]{}]|=>')



def parse_attributes(body: str, pos: int, params: dict[str, bytes]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in body.split(";"):
        item = item.strip()
        if not item:
            continue
        name, sep, value = item.partition(":")
        name, value = name.strip(), value.strip()
        if not sep or not name.startswith("$"):
            raise syntax_error(pos, item)
        if value.startswith("$"):
            if value[1:] not in params:
                raise ReplyError(f"No such parameter `{value[1:]}`")
            value = params[value[1:]].decode("utf-8", "replace")
        key = name[1:].lower()
        if key in ("weight", "epsilon", "shard_k_ratio"):
            try:
                out[key] = float(value)
            except ValueError:
                raise ReplyError(f"Invalid value ({value}) for `{name[1:]}`") from None
        elif key in ("slop", "ef_runtime", "batch_size"):
            try:
                out[key] = int(value)
            except ValueError:
                raise ReplyError(f"Invalid value ({value}) for `{name[1:]}`") from None
        elif key == "inorder":
            out[key] = value.lower() in ("true", "1")
        elif key == "phonetic":
            out[key] = phonetic.parse_flag(value)
        elif key in ("yield_distance_as", "hybrid_policy"):
            out[key] = value
        else:
            raise ReplyError(f"Invalid attribute {name[1:]}")
    return out


def parse_knn(clause: str, pos: int, full: str, params: dict[str, bytes]) -> KnnClause:
    end = _matching_bracket(clause)
    if end < 0:
        raise syntax_error(pos + len(clause), "<end of query>")
    inside = clause[1:end].split()
    rest = clause[end + 1:].strip()
    if len(inside) < 4 or inside[0].upper() != "KNN":
        raise syntax_error(pos + 1, clause[1:end][:20] or "]")
    k_raw = inside[1]
    if k_raw.startswith("$"):
        k_raw = _param(params, k_raw[1:])
    try:
        k = int(k_raw)
    except ValueError:
        raise syntax_error(pos + 1, k_raw) from None
    if k < 0:
        raise syntax_error(pos + 1, k_raw)
    if not inside[2].startswith("@"):
        raise syntax_error(pos + 1, inside[2])
    if not inside[3].startswith("$"):
        raise syntax_error(pos + 1, inside[3])
    blob_name = inside[3][1:]
    if blob_name not in params:
        raise ReplyError(f"No such parameter `{blob_name}`")
    knn = KnnClause(k=k, field=inside[2][1:], blob=params[blob_name], param=blob_name)
    i = 4
    while i < len(inside):
        word = inside[i].upper()
        if word == "AS" and i + 1 < len(inside):
            knn.alias = inside[i + 1]
            i += 2
            continue
        if i + 1 >= len(inside):
            raise syntax_error(pos + 1, inside[i])
        value = inside[i + 1]
        if value.startswith("$"):
            value = _param(params, value[1:])
        try:
            if word == "EF_RUNTIME":
                knn.ef = int(value)
                knn.ef_runtime = True
            elif word == "HYBRID_POLICY":
                knn.policy = value.upper()
            elif word == "BATCH_SIZE":
                knn.batch_size = int(value)
            elif word == "EPSILON":
                knn.epsilon = float(value)
            elif word == "SHARD_K_RATIO":
                knn.shard_ratio = float(value)
            elif word in SVS_QUERY_PARAMS:
                _svs_param(knn, word, value)
            else:
                raise ReplyError(f"Invalid attribute {inside[i]}")
        except ValueError:
            raise ReplyError(f"Invalid value ({value}) for `{inside[i]}`") from None
        i += 2
    if rest:
        if not rest.startswith("=>"):
            raise syntax_error(pos + end + 1, rest[:10])
        body = rest[2:].strip()
        if not (body.startswith("{") and body.endswith("}")):
            raise syntax_error(pos + end + 3, body[:10])
        attrs = parse_attributes(body[1:-1], pos + end + 3, params)
        knn.alias = attrs.get("yield_distance_as", knn.alias)
        if "ef_runtime" in attrs:
            knn.ef, knn.ef_runtime = attrs["ef_runtime"], True
        if "hybrid_policy" in attrs:
            knn.policy = str(attrs["hybrid_policy"]).upper()
        knn.batch_size = attrs.get("batch_size", knn.batch_size)
        knn.shard_ratio = attrs.get("shard_k_ratio", knn.shard_ratio)
    if knn.policy not in (None, "BATCHES", "ADHOC_BF"):
        raise ReplyError("invalid hybrid policy was given")
    if knn.ef is not None and knn.ef <= 0:
        raise ReplyError("Invalid value for EF_RUNTIME")
    return knn


def _svs_param(knn: KnnClause, word: str, value: str) -> None:
    """One SVS-VAMANA runtime parameter, checked as VecSim's resolver checks it."""
    svs = knn.svs if knn.svs is not None else {}
    if word in svs:
        raise ReplyError(VECSIM_ERROR + "Parameter was specified twice")
    if word == "USE_SEARCH_HISTORY":
        if value.upper() not in SEARCH_HISTORY:
            raise ReplyError(VECSIM_ERROR + "Invalid value was given")
        svs[word] = value.upper()
    else:
        if not value.isdigit() or int(value) <= 0:
            raise ReplyError(VECSIM_ERROR + "Invalid value was given")
        svs[word] = int(value)
        windows = [svs[name] for name in ("SEARCH_WINDOW_SIZE", "SEARCH_BUFFER_CAPACITY") if name in svs]
        knn.ef = max(windows) if not knn.ef_runtime else knn.ef
    knn.svs = svs


def _param(params: dict[str, bytes], name: str) -> str:
    if name not in params:
        raise ReplyError(f"No such parameter `{name}`")
    return params[name].decode("utf-8", "replace")


def _matching_bracket(clause: str) -> int:
    depth = 0
    for i, ch in enumerate(clause):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth == 0:
                return i
    return -1
