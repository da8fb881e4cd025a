"""FT.HYBRID in Redis 8.4's clause form: a text leg and a vector leg, fused by RRF or LINEAR.

``FT.HYBRID idx SEARCH q [SCORER s] [YIELD_SCORE_AS a] VSIM @v $blob [KNN n K k [EF_RUNTIME e]]
[RANGE n RADIUS r [EPSILON e]] [FILTER expr] [YIELD_SCORE_AS a] [COMBINE RRF n [CONSTANT c] [WINDOW w]
| COMBINE LINEAR n [ALPHA a] [BETA b] [WINDOW w]] [YIELD_SCORE_AS a] [LOAD ...] [GROUPBY ...] [APPLY ...]
[SORTBY ...] [FILTER expr] [LIMIT o n] [PARAMS ...] [TIMEOUT ms]``. Counts prefix every following
token of a clause. Defaults are Redis's: KNN K 10 (at most WINDOW), RRF WINDOW 20 CONSTANT 60,
LINEAR ALPHA 0.3 BETA 0.7, LIMIT 0 10, SCORER BM25STD. RRF adds ``1 / (constant + rank)`` per leg;
LINEAR adds ``alpha * text score + beta * vector score``, the vector score being RediSearch's
normalised similarity (COSINE ``(2 - d) / 2``, IP ``(1 + dot) / 2``, L2 ``1 / (1 + d)``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pion.protocol.errors import ReplyError
from pion.vector import aggregate, scoring
from pion.vector.search import _int, parse_params


@dataclass
class HybridRequest:
    query: str
    scorer: str = scoring.DEFAULT
    text_alias: str | None = None
    vector_field: str = ""
    vector_ref: bytes = b""
    method: str = "KNN"
    k: int = 10
    ef: int | None = None
    radius: float | None = None
    epsilon: float | None = None
    vfilter: str | None = None
    policy: str | None = None
    vector_alias: str | None = None
    combine: str = "RRF"
    constant: float = 60.0
    window: int = 20
    alpha: float = 0.3
    beta: float = 0.7
    combined_alias: str | None = None
    post: aggregate.AggregateRequest = field(default_factory=lambda: aggregate.AggregateRequest(query="*"))
    limit: tuple[int, int] = (0, 10)
    sorted_explicitly: bool = False
    params: dict[str, bytes] = field(default_factory=dict)
    dialect: int = 2

    def blob(self) -> bytes:
        ref = self.vector_ref
        if ref.startswith(b"$"):
            name = ref[1:].decode("utf-8", "replace")
            if name not in self.params:
                raise ReplyError(f"No such parameter `{name}`")
            return self.params[name]
        return ref


def _word(argv: list[bytes], i: int) -> bytes:
    return argv[i].upper() if i < len(argv) else b""


def _counted(argv: list[bytes], i: int, what: str) -> tuple[list[bytes], int]:
    count = _int(argv[i] if i < len(argv) else b"", what)
    if i + 1 + count > len(argv):
        raise ReplyError(f"Bad arguments for {what}: Expected an argument, but none provided")
    return argv[i + 1:i + 1 + count], i + 1 + count


def parse_hybrid(argv: list[bytes], default_dialect: int) -> HybridRequest:
    if _word(argv, 2) != b"SEARCH":
        raise ReplyError("SEARCH argument is required")
    if len(argv) < 4:
        raise ReplyError("Missing argument value for SEARCH")
    req = HybridRequest(query=argv[3].decode("utf-8", "replace"), dialect=max(2, default_dialect))
    i = 4
    while i < len(argv) and _word(argv, i) != b"VSIM":
        word = _word(argv, i)
        if word == b"SCORER":
            value = argv[i + 1] if i + 1 < len(argv) else b""
            if value.isdigit():
                items, i = _counted(argv, i + 1, "SCORER")
                if len(items) != 1:
                    raise ReplyError("SCORER parameters are not supported by Pion")
                req.scorer = scoring.check(items[0].decode())
                continue
            req.scorer = scoring.check(value.decode())
            i += 2
        elif word == b"YIELD_SCORE_AS":
            req.text_alias = argv[i + 1].decode() if i + 1 < len(argv) else _missing("YIELD_SCORE_AS")
            i += 2
        else:
            raise ReplyError(f"Unknown argument `{argv[i].decode('utf-8', 'replace')}` in SEARCH")
    if _word(argv, i) != b"VSIM":
        raise ReplyError("VSIM argument is required")
    if i + 2 >= len(argv):
        raise ReplyError("Missing argument value for VSIM")
    req.vector_field = argv[i + 1].decode("utf-8", "replace").lstrip("@")
    if not argv[i + 1].startswith(b"@"):
        raise ReplyError("Missing @ prefix for vector field name")
    req.vector_ref = bytes(argv[i + 2])
    i += 3
    while i < len(argv):
        word = _word(argv, i)
        if word == b"KNN":
            items, i = _counted(argv, i + 1, "KNN")
            _knn_items(req, items)
        elif word == b"RANGE":
            items, i = _counted(argv, i + 1, "RANGE")
            _range_items(req, items)
        elif word == b"FILTER" and req.vfilter is None:
            i = _vsim_filter(req, argv, i + 1)
        elif word == b"YIELD_SCORE_AS":
            req.vector_alias = argv[i + 1].decode() if i + 1 < len(argv) else _missing("YIELD_SCORE_AS")
            i += 2
        else:
            break
    if _word(argv, i) == b"COMBINE":
        method = _word(argv, i + 1)
        if method not in (b"RRF", b"LINEAR"):
            raise ReplyError(f"Unknown COMBINE method `{argv[i + 1].decode() if i + 1 < len(argv) else ''}`")
        req.combine = method.decode()
        items, i = _counted(argv, i + 2, "COMBINE")
        _combine_items(req, items)
        if _word(argv, i) == b"YIELD_SCORE_AS":
            req.combined_alias = argv[i + 1].decode() if i + 1 < len(argv) else _missing("YIELD_SCORE_AS")
            i += 2
    if req.method == "KNN":
        req.k = min(req.k, req.window)
    rest = argv[:3] + argv[i:]
    _post(req, rest, default_dialect)
    return req


def _missing(name: str) -> Any:
    raise ReplyError(f"Missing argument value for {name}")


def _knn_items(req: HybridRequest, items: list[bytes]) -> None:
    req.method = "KNN"
    j = 0
    while j < len(items):
        name = items[j].upper()
        if j + 1 >= len(items):
            raise ReplyError(f"Missing argument value for {name.decode()}")
        value = items[j + 1]
        if name == b"K":
            req.k = _int(value, "K", 1)
        elif name == b"EF_RUNTIME":
            req.ef = _int(value, "EF_RUNTIME", 1)
        elif name == b"SHARD_K_RATIO":
            pass  # cluster-only; one node answers all of K
        elif name == b"YIELD_SCORE_AS":
            req.vector_alias = value.decode()
        else:
            raise ReplyError(f"Unknown argument `{items[j].decode()}` in KNN")
        j += 2


def _range_items(req: HybridRequest, items: list[bytes]) -> None:
    req.method = "RANGE"
    j = 0
    while j < len(items):
        name = items[j].upper()
        if j + 1 >= len(items):
            raise ReplyError(f"Missing argument value for {name.decode()}")
        value = items[j + 1].decode()
        try:
            if name == b"RADIUS":
                req.radius = float(value)
            elif name == b"EPSILON":
                req.epsilon = float(value)
            elif name == b"YIELD_SCORE_AS":
                req.vector_alias = value
            else:
                raise ReplyError(f"Unknown argument `{items[j].decode()}` in RANGE")
        except ValueError:
            raise ReplyError(f"Invalid {name.decode()} value") from None
        j += 2
    if req.radius is None:
        raise ReplyError("Missing required argument RADIUS")


def _vsim_filter(req: HybridRequest, argv: list[bytes], i: int) -> int:
    if i >= len(argv):
        raise ReplyError("Missing argument value for FILTER")
    if argv[i].isdigit() and i + 1 < len(argv):
        items, i = _counted(argv, i, "FILTER")
        req.vfilter = items[0].decode("utf-8", "replace") if items else "*"
        rest = items[1:]
        j = 0
        while j < len(rest):
            if rest[j].upper() == b"POLICY" and j + 1 < len(rest):
                policy = rest[j + 1].upper().decode()
                req.policy = "ADHOC_BF" if policy in ("ADHOC", "ADHOC_BF") else policy
                j += 2
            elif rest[j].upper() == b"BATCH_SIZE" and j + 1 < len(rest):
                j += 2
            else:
                raise ReplyError(f"Unknown argument `{rest[j].decode()}` in FILTER")
        return i
    req.vfilter = argv[i].decode("utf-8", "replace")
    i += 1
    if _word(argv, i) == b"POLICY" and i + 1 < len(argv):
        policy = argv[i + 1].upper().decode()
        req.policy = "ADHOC_BF" if policy in ("ADHOC", "ADHOC_BF") else policy
        i += 2
        if _word(argv, i) == b"BATCH_SIZE":
            i += 2
    return i


def _combine_items(req: HybridRequest, items: list[bytes]) -> None:
    j = 0
    while j < len(items):
        name = items[j].upper()
        if j + 1 >= len(items):
            raise ReplyError(f"Missing argument value for {name.decode()}")
        raw = items[j + 1].decode()
        try:
            if name == b"CONSTANT" and req.combine == "RRF":
                req.constant = float(raw)
            elif name == b"WINDOW":
                req.window = _int(items[j + 1], "WINDOW", 1)
            elif name == b"ALPHA" and req.combine == "LINEAR":
                req.alpha = float(raw)
            elif name == b"BETA" and req.combine == "LINEAR":
                req.beta = float(raw)
            elif name == b"YIELD_SCORE_AS":
                req.combined_alias = raw
            else:
                raise ReplyError(f"Unknown argument `{items[j].decode()}` in COMBINE")
        except ValueError:
            raise ReplyError(f"Invalid {name.decode()} value") from None
        j += 2


def _post(req: HybridRequest, rest: list[bytes], default_dialect: int) -> None:
    """The post-processing clauses, parsed as FT.AGGREGATE's (LIMIT kept apart)."""
    cleaned: list[bytes] = rest[:3]
    i = 3
    while i < len(rest):
        word = rest[i].upper()
        if word == b"LIMIT":
            if i + 2 >= len(rest):
                raise ReplyError("Bad arguments for LIMIT: Expected an argument, but none provided")
            req.limit = (_int(rest[i + 1], "LIMIT"), _int(rest[i + 2], "LIMIT"))
            i += 3
            continue
        if word == b"PARAMS":
            req.params, i = parse_params(rest, i)
            continue
        if word == b"NOSORT":
            i += 1
            continue
        if word == b"GROUPBY" and i + 1 < len(rest) and rest[i + 1].isdigit():
            count = int(rest[i + 1])
            items = [x if x.startswith(b"@") else b"@" + x for x in rest[i + 2:i + 2 + count]]
            cleaned += [b"GROUPBY", rest[i + 1], *items]
            i += 2 + count
            continue
        if word == b"SORTBY":
            req.sorted_explicitly = True
            if i + 1 < len(rest) and rest[i + 1].isdigit():
                count = int(rest[i + 1])
                items = [(b"@" + x if x.upper() not in (b"ASC", b"DESC") and not x.startswith(b"@") else x)
                         for x in rest[i + 2:i + 2 + count]]
                cleaned += [b"SORTBY", rest[i + 1], *items]
                i += 2 + count
                continue
        cleaned.append(rest[i])
        i += 1
    req.post = aggregate.parse_aggregate(cleaned, default_dialect)
    req.post.params = req.params


def normalized_vector_score(metric: str, distance: float) -> float:
    if metric == "L2":
        return 1.0 / (1.0 + distance)
    if metric == "IP":
        return (1.0 + (1.0 - distance)) / 2.0
    return (1.0 + (1.0 - distance)) / 2.0


def fuse(req: HybridRequest, text_ranked: list[tuple[int, float]], vector_ranked: list[tuple[int, float, float]]
         ) -> list[tuple[int, float, float | None, float | None, float | None]]:
    """(doc, combined score, text score, vector distance, vector score), best first."""
    text_ranked = text_ranked[:req.window]
    vector_ranked = vector_ranked[:req.window]
    text_rank = {doc: (rank, score) for rank, (doc, score) in enumerate(text_ranked, 1)}
    vec_rank = {doc: (rank, dist, vscore) for rank, (doc, dist, vscore) in enumerate(vector_ranked, 1)}
    out = []
    for doc in dict.fromkeys([d for d, _ in text_ranked] + [d for d, _, _ in vector_ranked]):
        t = text_rank.get(doc)
        v = vec_rank.get(doc)
        if req.combine == "RRF":
            combined = (1.0 / (req.constant + t[0]) if t else 0.0) + (1.0 / (req.constant + v[0]) if v else 0.0)
        else:
            combined = (req.alpha * t[1] if t else 0.0) + (req.beta * v[2] if v else 0.0)
        out.append((doc, combined, t[1] if t else None, v[1] if v else None, v[2] if v else None))
    out.sort(key=lambda r: (-r[1], r[0]))
    return out
