"""Index definitions: what FT.CREATE (and FT.ALTER ... SCHEMA ADD) say, parsed and checked.

An ``IndexDefinition`` is pure data: the key type and prefixes it covers, the document defaults,
and its fields. It is rebuilt from the original argv on restart (the snapshot and the log keep
argv, not a private encoding), so parsing must stay deterministic. Error texts are RediSearch's
(``spec.c``): ``Unknown argument `X```, ``Duplicate field in schema - f``, ``No schema found``,
``Missing mandatory parameter: cannot create HNSW index without specifying DIM argument``.
Defaults are Redis's: HNSW ``M 16``, ``EF_CONSTRUCTION 200``, ``EF_RUNTIME 10``, ``EPSILON 0.01``;
SVS-VAMANA ``GRAPH_MAX_DEGREE 32``, ``CONSTRUCTION_WINDOW_SIZE 200``, ``SEARCH_WINDOW_SIZE 10``,
``TRAINING_THRESHOLD 10240``, ``REDUCE DIM/2`` (``svs_graph`` says how they run); TEXT ``WEIGHT 1``;
TAG ``SEPARATOR ,``; ``SCORE 1.0``; ``LANGUAGE english``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pion.protocol.errors import ReplyError
from pion.vector import chinese, phonetic, text

FIELD_TYPES = ("TEXT", "TAG", "NUMERIC", "GEO", "VECTOR", "GEOSHAPE")
VECTOR_TYPES = {"FLOAT32": 4, "FLOAT64": 8, "FLOAT16": 2, "BFLOAT16": 2, "INT8": 1, "UINT8": 1}
METRICS = ("L2", "IP", "COSINE")
MAX_DIM = 32768
#: HNSW's M: at least 2 (below, the graph degenerates into chains), at most UINT16_MAX / 2 as
#: RediSearch's VecSim (its link counts are 16-bit)
MIN_M, MAX_M = 2, 32767
#: EF_CONSTRUCTION / EF_RUNTIME: usearch sizes per-search buffers by it (10^9 is an
#: out-of-memory at the first add); a query's EF_RUNTIME is clamped to the graph's size instead
MAX_EF = 1_000_000
#: SVS-VAMANA's defaults (Redis 8.2's documentation): GRAPH_MAX_DEGREE 32 (HNSW's 2M),
#: CONSTRUCTION_WINDOW_SIZE 200, SEARCH_WINDOW_SIZE 10, TRAINING_THRESHOLD 10 * 1024 (at most
#: 100 * 1024 used), REDUCE DIM / 2; TYPE FLOAT16 or FLOAT32 only
SVS_GRAPH_MAX_DEGREE = 32
SVS_CONSTRUCTION_WINDOW_SIZE = 200
SVS_SEARCH_WINDOW_SIZE = 10
SVS_TRAINING_THRESHOLD = 10 * 1024
SVS_TRAINING_MIN = 1024
#: VecSim trains on at most this many vectors (a larger TRAINING_THRESHOLD is clamped, not refused)
SVS_TRAINING_MAX = 100 * 1024
SVS_TYPES = ("FLOAT16", "FLOAT32")
#: COMPRESSION's kinds, by their upper-case spelling -> Redis's spelling
SVS_COMPRESSIONS = {name.upper(): name for name in ("LVQ8", "LVQ4", "LVQ4x4", "LVQ4x8", "LeanVec4x8", "LeanVec8x8")}
#: rows a FLAT/HNSW field allocates up front, whatever INITIAL_CAP says (it grows by doubling)
PREALLOCATE_MAX = 1024


@dataclass
class VectorParams:
    algorithm: str = "FLAT"
    data_type: str = "FLOAT32"
    dim: int = 0
    metric: str = "L2"
    m: int = 16
    ef_construction: int = 200
    ef_runtime: int = 10
    epsilon: float = 0.01
    initial_cap: int = 0
    block_size: int = 1024
    #: SVS-VAMANA (``svs_graph``): what FT.CREATE said, for FT.INFO; the graph runs on ``m``,
    #: ``ef_construction`` and ``ef_runtime``, which ``_parse_vector`` derives from them
    graph_max_degree: int = SVS_GRAPH_MAX_DEGREE
    construction_window_size: int = SVS_CONSTRUCTION_WINDOW_SIZE
    search_window_size: int = SVS_SEARCH_WINDOW_SIZE
    #: COMPRESSION as given (None: none); every kind runs as ``GlobalSQ8`` (see ``svs_graph``)
    compression: str | None = None
    training_threshold: int = SVS_TRAINING_THRESHOLD
    reduce: int | None = None

    @property
    def blob_size(self) -> int:
        return self.dim * VECTOR_TYPES[self.data_type]


@dataclass
class FieldSpec:
    identifier: str  # hash field name or JSONPath
    name: str  # the attribute (AS alias, or the identifier)
    type: str
    sortable: bool = False
    unf: bool = False
    noindex: bool = False
    nostem: bool = False
    #: TEXT PHONETIC's matcher (``dm:en`` ...): its tokens' Double Metaphone codes are indexed (``phonetic``)
    phonetic: str | None = None
    weight: float = 1.0
    separator: str = ","
    case_sensitive: bool = False
    with_suffix_trie: bool = False
    index_empty: bool = False
    index_missing: bool = False
    vector: VectorParams | None = None
    #: Pion: a VECTOR field the server computes from this (text) field (``... VECTOR ... EMBED body``)
    embed_from: str | None = None
    #: GEOSHAPE: SPHERICAL (longitude, latitude; RediSearch's default) or FLAT (x, y)
    coord_system: str = "SPHERICAL"

    def flags(self) -> list[str]:
        """FT.INFO's bare flag tokens, in RediSearch's order."""
        out = []
        if self.case_sensitive:
            out.append("CASESENSITIVE")
        if self.sortable:
            out.append("SORTABLE")
        if self.unf or (self.sortable and self.type == "NUMERIC"):  # a number is never normalised
            out.append("UNF")
        if self.nostem:
            out.append("NOSTEM")
        if self.noindex:
            out.append("NOINDEX")
        if self.with_suffix_trie:
            out.append("WITHSUFFIXTRIE")
        if self.index_empty:
            out.append("INDEXEMPTY")
        if self.index_missing:
            out.append("INDEXMISSING")
        return out


@dataclass
class IndexDefinition:
    name: str
    key_type: str = "HASH"
    prefixes: list[bytes] = field(default_factory=lambda: [b""])
    filter: str | None = None
    language: str = "english"
    language_field: str | None = None
    score: float = 1.0
    score_field: str | None = None
    payload_field: str | None = None
    stopwords: frozenset[str] | None = None  # None: the default list
    options: set[str] = field(default_factory=set)  # NOOFFSETS NOHL NOFIELDS NOFREQS MAXTEXTFIELDS ...
    temporary: int | None = None
    skip_initial_scan: bool = False
    fields: list[FieldSpec] = field(default_factory=list)
    #: argv of FT.CREATE and of each FT.ALTER, replayed on restart
    history: list[list[bytes]] = field(default_factory=list)

    @property
    def stopword_set(self) -> frozenset[str]:
        return text.DEFAULT_STOPWORDS if self.stopwords is None else self.stopwords

    def field(self, name: str) -> FieldSpec | None:
        for spec in self.fields:
            if spec.name == name:
                return spec
        return None

    def covers(self, key: bytes) -> bool:
        return any(key.startswith(prefix) for prefix in self.prefixes)


def _err(message: str) -> ReplyError:
    return ReplyError(message)


class _Args:
    def __init__(self, argv: list[bytes], pos: int) -> None:
        self.argv = argv
        self.pos = pos

    def more(self) -> bool:
        return self.pos < len(self.argv)

    def peek_upper(self) -> str:
        return self.argv[self.pos].decode("utf-8", "replace").upper() if self.more() else ""

    def next(self, what: str) -> bytes:
        if not self.more():
            raise _err(f"Bad arguments for {what}: Expected an argument, but none provided")
        value = self.argv[self.pos]
        self.pos += 1
        return value

    def next_str(self, what: str) -> str:
        return self.next(what).decode("utf-8", "replace")

    def next_int(self, what: str, minimum: int = 0, maximum: int | None = None) -> int:
        raw = self.next_str(what)
        try:
            value = int(raw)
        except ValueError:
            raise _err(f"Bad arguments for {what}: Could not convert argument to expected type") from None
        if value < minimum or (maximum is not None and value > maximum):
            raise _err(f"Bad arguments for {what}: Value is outside acceptable bounds")
        return value

    def next_float(self, what: str) -> float:
        raw = self.next_str(what)
        try:
            return float(raw)
        except ValueError:
            raise _err(f"Bad arguments for {what}: Could not convert argument to expected type") from None


def parse_create(argv: list[bytes]) -> IndexDefinition:
    """FT.CREATE index [options] SCHEMA field ..."""
    definition = IndexDefinition(name=argv[1].decode("utf-8", "replace"))
    args = _Args(argv, 2)
    while args.more():
        word = args.peek_upper()
        args.pos += 1
        if word == "SCHEMA":
            break
        if word == "ON":
            kind = args.next_str("ON").upper()
            if kind not in ("HASH", "JSON"):
                raise _err(f"Unknown argument `{kind}`" if kind else "Invalid rule type")
            definition.key_type = kind
        elif word == "PREFIX":
            count = args.next_int("PREFIX")
            definition.prefixes = [args.next("PREFIX") for _ in range(count)] or [b""]
        elif word == "FILTER":
            definition.filter = args.next_str("FILTER")
        elif word == "LANGUAGE":
            language = args.next_str("LANGUAGE").lower()
            if language not in text.LANGUAGES and language != chinese.LANGUAGE:
                raise _err("Invalid language")
            if language == chinese.LANGUAGE:
                if not chinese.available():
                    raise _err("LANGUAGE chinese needs the jieba segmenter: pip install 'pion[search]'")
                chinese.warm_up()
            definition.language = language
        elif word == "LANGUAGE_FIELD":
            definition.language_field = args.next_str("LANGUAGE_FIELD")
        elif word == "SCORE":
            score = args.next_float("SCORE")
            if not 0.0 <= score <= 1.0:
                raise _err("Invalid score")
            definition.score = score
        elif word == "SCORE_FIELD":
            definition.score_field = args.next_str("SCORE_FIELD")
        elif word == "PAYLOAD_FIELD":
            definition.payload_field = args.next_str("PAYLOAD_FIELD")
        elif word == "STOPWORDS":
            count = args.next_int("STOPWORDS")
            definition.stopwords = frozenset(args.next_str("STOPWORDS").lower() for _ in range(count))
        elif word in ("NOOFFSETS", "NOHL", "NOFIELDS", "NOFREQS", "MAXTEXTFIELDS"):
            definition.options.add(word)
        elif word == "SKIPINITIALSCAN":
            definition.skip_initial_scan = True
        elif word == "TEMPORARY":
            definition.temporary = args.next_int("TEMPORARY", minimum=1)
        elif word == "ASYNC":
            continue
        elif word == "INDEXALL":
            args.next_str("INDEXALL")
        else:
            raise _err(f"Unknown argument `{argv[args.pos - 1].decode('utf-8', 'replace')}`")
    else:
        raise _err("No schema found")
    if not args.more():
        raise _err("Fields arguments are missing")
    definition.fields = parse_fields(args, definition, [])
    definition.history = [list(argv)]
    return definition


def parse_alter(definition: IndexDefinition, argv: list[bytes]) -> list[FieldSpec]:
    """FT.ALTER index [SKIPINITIALSCAN] SCHEMA ADD field ...: the new fields (not yet added)."""
    args = _Args(argv, 2)
    if args.peek_upper() == "SKIPINITIALSCAN":
        args.pos += 1
    if args.peek_upper() != "SCHEMA":
        raise _err("Unknown argument `" + (args.argv[args.pos].decode("utf-8", "replace") if args.more() else "") + "`")
    args.pos += 1
    if args.peek_upper() != "ADD":
        raise _err("Unknown action passed to ALTER SCHEMA")
    args.pos += 1
    if not args.more():
        raise _err("No fields provided")
    return parse_fields(args, definition, definition.fields)


def parse_fields(args: _Args, definition: IndexDefinition, existing: list[FieldSpec]) -> list[FieldSpec]:
    fields: list[FieldSpec] = []
    names = {spec.name for spec in existing}
    while args.more():
        identifier = args.next_str("field")
        if not identifier:
            raise _err("Field name cannot be empty")
        name = identifier
        if args.peek_upper() == "AS":
            args.pos += 1
            if not args.more():
                raise _err("AS requires an argument")
            name = args.next_str("AS")
        kind = args.peek_upper()
        if kind not in FIELD_TYPES:
            if not args.more():
                raise _err(f"Field `{identifier}` does not have a type")
            raise _err(f"Invalid field type for field `{identifier}`")
        args.pos += 1
        if name in names:
            raise _err(f"Duplicate field in schema - {name}")
        names.add(name)
        spec = FieldSpec(identifier=identifier, name=name, type=kind)
        if kind == "GEOSHAPE" and args.peek_upper() in ("FLAT", "SPHERICAL"):
            spec.coord_system = args.peek_upper()
            args.pos += 1
        if kind == "VECTOR":
            spec.vector = _parse_vector(args)
        _parse_field_options(args, spec)
        if spec.embed_from is not None and (definition.key_type != "HASH" or spec.vector.data_type != "FLOAT32"):  # type: ignore[union-attr]
            raise _err("EMBED vector fields are computed on HASH indexes, as TYPE FLOAT32")
        if spec.noindex and spec.index_missing:
            raise _err(f"'Field cannot be defined with both `NOINDEX` and `INDEXMISSING` `{identifier}` '")
        fields.append(spec)
    return fields


def _parse_field_options(args: _Args, spec: FieldSpec) -> None:
    """The type's own options in any order, then the common ones (SORTABLE [UNF], NOINDEX), as
    RediSearch 2.10 reads a field: after the common ones a type's option is the next field's name
    (``t TEXT SORTABLE WEIGHT 2`` answers ``Invalid field type for field `WEIGHT```)."""
    _parse_type_options(args, spec)
    while args.more() and spec.type != "VECTOR":
        word = args.peek_upper()
        if word == "SORTABLE":
            spec.sortable = True
            args.pos += 1
            if args.peek_upper() == "UNF":
                spec.unf = True
                args.pos += 1
        elif word == "NOINDEX":
            spec.noindex = True
            args.pos += 1
        else:
            return


def _parse_type_options(args: _Args, spec: FieldSpec) -> None:
    while args.more():
        word = args.peek_upper()
        if word == "INDEXMISSING":
            spec.index_missing = True
            args.pos += 1
        elif word == "INDEXEMPTY" and spec.type in ("TEXT", "TAG"):
            spec.index_empty = True
            args.pos += 1
        elif word == "WITHSUFFIXTRIE" and spec.type in ("TEXT", "TAG"):
            spec.with_suffix_trie = True
            args.pos += 1
        elif word == "NOSTEM" and spec.type == "TEXT":
            spec.nostem = True
            args.pos += 1
        elif word == "WEIGHT" and spec.type == "TEXT":
            args.pos += 1
            spec.weight = args.next_float("weight")
        elif word == "PHONETIC" and spec.type == "TEXT":
            args.pos += 1
            if not args.more():
                raise _err("PHONETIC requires an argument")
            spec.phonetic = phonetic.check_matcher(args.next_str("PHONETIC"))
        elif word == "SEPARATOR" and spec.type == "TAG":
            args.pos += 1
            if not args.more():
                raise _err("SEPARATOR requires an argument")
            sep = args.next_str("SEPARATOR")
            if len(sep) != 1:
                raise _err(f"Tag separator must be a single character. Got `{sep}`")
            spec.separator = sep
        elif word == "CASESENSITIVE" and spec.type == "TAG":
            spec.case_sensitive = True
            args.pos += 1
        elif word == "EMBED" and spec.type == "VECTOR":
            args.pos += 1
            if not args.more():
                raise _err("EMBED requires the text field whose embedding fills this vector field")
            spec.embed_from = args.next_str("EMBED")
        else:
            return


def _parse_vector(args: _Args) -> VectorParams:
    algo = args.next_str("vector similarity algorithm").upper()
    if algo not in ("FLAT", "HNSW", "SVS-VAMANA"):
        raise _err(f"Bad arguments for vector similarity algorithm: Unknown argument `{algo}`")
    try:
        count = int(args.next_str("vector similarity number of parameters"))
    except ValueError:
        raise _err("Bad arguments for vector similarity number of parameters: Could not convert argument to expected type") from None
    if count % 2:
        raise _err(f"Bad number of arguments for vector similarity index: got {count} but expected even number as "
                   "algorithm parameters (should be submitted as named arguments)")
    if args.pos + count > len(args.argv):
        raise _err(f"Expected {count} parameters but got {len(args.argv) - args.pos}")
    if algo == "SVS-VAMANA":
        return _parse_svs(args, count)
    params = VectorParams(algorithm=algo)
    seen = set()
    end = args.pos + count
    while args.pos < end:
        name = args.next_str("vector").upper()
        seen.add(name)
        what = f"algorithm {algo} parameter {name}"
        if name == "TYPE":
            kind = args.next_str(what).upper()
            if kind not in VECTOR_TYPES:
                raise _err(f"Bad arguments for vector similarity {algo} index type: {kind}")
            params.data_type = kind
        elif name == "DIM":
            params.dim = args.next_int(what, minimum=1)
            if params.dim > MAX_DIM:
                raise _err(f"Bad arguments for vector similarity {algo} index dim: value is larger than {MAX_DIM}")
        elif name == "DISTANCE_METRIC":
            metric = args.next_str(what).upper()
            if metric not in METRICS:
                raise _err(f"Bad arguments for vector similarity {algo} index metric: {metric}")
            params.metric = metric
        elif name == "INITIAL_CAP":
            params.initial_cap = args.next_int(what)
        elif name == "BLOCK_SIZE" and algo == "FLAT":
            params.block_size = args.next_int(what, minimum=1)
        elif name == "M" and algo == "HNSW":
            params.m = args.next_int(what, minimum=MIN_M, maximum=MAX_M)
        elif name == "EF_CONSTRUCTION" and algo == "HNSW":
            params.ef_construction = args.next_int(what, minimum=1, maximum=MAX_EF)
        elif name == "EF_RUNTIME" and algo == "HNSW":
            params.ef_runtime = args.next_int(what, minimum=1, maximum=MAX_EF)
        elif name == "EPSILON" and algo == "HNSW":
            params.epsilon = args.next_float(what)
            if params.epsilon < 0:
                raise _err(f"Bad arguments for {what}: Value is outside acceptable bounds")
        else:
            raise _err(f"Bad arguments for algorithm {algo}: {name}")
    for required in ("TYPE", "DIM", "DISTANCE_METRIC"):
        if required not in seen:
            raise _err(f"Missing mandatory parameter: cannot create {algo} index without specifying {required} argument")
    _check_memory(params)
    return params


def _parse_svs(args: _Args, count: int) -> VectorParams:
    """SVS-VAMANA's parameters, with RediSearch 8.4's texts (``spec.c`` parseVectorField_svs):
    ``Bad arguments for vector similarity SVS-VAMANA index `NAME`: <why>``, an unknown name
    ``Bad arguments for algorithm SVS-VAMANA: NAME``, a TYPE other than FLOAT16/FLOAT32 ``Not
    supported data type is given. Expected: FLOAT16, FLOAT32``, TRAINING_THRESHOLD at least
    1024 and only with COMPRESSION, REDUCE only with a LeanVec COMPRESSION."""
    params = VectorParams(algorithm="SVS-VAMANA")
    seen: set[str] = set()
    end = args.pos + count
    while args.pos < end:
        name = args.next_str("vector").upper()
        what = f"vector similarity SVS-VAMANA index `{name}`"
        if name not in _SVS_PARAMS:
            raise _err(f"Bad arguments for algorithm SVS-VAMANA: {args.argv[args.pos - 1].decode('utf-8', 'replace')}")
        seen.add(name)
        if name in ("TYPE", "DISTANCE_METRIC", "COMPRESSION"):
            word = args.next_str(what).upper()
            known = {"TYPE": VECTOR_TYPES, "DISTANCE_METRIC": METRICS, "COMPRESSION": SVS_COMPRESSIONS}[name]
            if word not in known:
                raise _err(f"Bad arguments for {what}: Unknown argument")
            if name == "TYPE":
                if word not in SVS_TYPES:
                    raise _err("Not supported data type is given. Expected: FLOAT16, FLOAT32")
                params.data_type = word
            elif name == "DISTANCE_METRIC":
                params.metric = word
            else:
                params.compression = SVS_COMPRESSIONS[word]
        elif name == "EPSILON":
            params.epsilon = args.next_float(what)
            if params.epsilon < 0:
                raise _err(f"Bad arguments for {what}: Value is outside acceptable bounds")
        else:
            # DIM up to MAX_DIM and the windows up to MAX_EF, as for HNSW (usearch allocates by them)
            top = {"DIM": MAX_DIM, "GRAPH_MAX_DEGREE": 2 * MAX_M, "TRAINING_THRESHOLD": None, "REDUCE": None}
            value = args.next_int(what, minimum=1, maximum=top.get(name, MAX_EF))
            if name == "TRAINING_THRESHOLD" and value < SVS_TRAINING_MIN:
                raise _err(f"Invalid TRAINING_THRESHOLD: cannot be lower than DEFAULT_BLOCK_SIZE ({SVS_TRAINING_MIN})")
            setattr(params, _SVS_PARAMS[name], value)
    for required in ("TYPE", "DIM", "DISTANCE_METRIC"):
        if required not in seen:
            raise _err(f"Missing mandatory parameter: cannot create SVS-VAMANA index without specifying {required} argument")
    if params.compression is None and "TRAINING_THRESHOLD" in seen:
        raise _err("TRAINING_THRESHOLD is irrelevant when compression was not requested")
    leanvec = params.compression is not None and params.compression.startswith("LeanVec")
    if not leanvec and "REDUCE" in seen:
        raise _err("REDUCE is irrelevant when compression is not of type LeanVec")
    if leanvec and params.reduce is None:
        params.reduce = params.dim // 2
    finish_svs(params)
    _check_memory(params)
    return params


#: SVS-VAMANA's parameter names -> the VectorParams attribute an integer one sets
_SVS_PARAMS = {"TYPE": "", "DIM": "dim", "DISTANCE_METRIC": "", "GRAPH_MAX_DEGREE": "graph_max_degree",
               "CONSTRUCTION_WINDOW_SIZE": "construction_window_size", "SEARCH_WINDOW_SIZE": "search_window_size",
               "EPSILON": "", "COMPRESSION": "", "TRAINING_THRESHOLD": "training_threshold", "REDUCE": "reduce"}


def finish_svs(params: VectorParams) -> None:
    """The usearch graph's parameters from SVS's: GRAPH_MAX_DEGREE is HNSW's level-0 degree 2M."""
    params.m = max(MIN_M, params.graph_max_degree // 2)
    params.ef_construction = params.construction_window_size
    params.ef_runtime = params.search_window_size


def element_size(params: VectorParams) -> int:
    """Bytes one vector costs, as RediSearch's VecSim estimates it: the vector and its label,
    and for HNSW its level-0 links (2M) and one upper level (M), 4 bytes each."""
    size = params.dim * VECTOR_TYPES[params.data_type] + 8
    if params.algorithm == "HNSW":
        size += 3 * params.m * 4 + 16
    elif params.algorithm == "SVS-VAMANA":  # one level of GRAPH_MAX_DEGREE links
        size += params.graph_max_degree * 4 + 16
    return size


def memory_limit() -> int:
    """What RediSearch sizes vector indexes against when no maxmemory is set: the machine's memory."""
    import os

    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 1 << 40


def _check_memory(params: VectorParams) -> None:
    """RediSearch's server-limit checks: INITIAL_CAP vectors must fit the memory, a BLOCK_SIZE
    block a tenth of it (the same texts as its spec.c)."""
    size = element_size(params)
    limit = memory_limit()
    if params.initial_cap and params.initial_cap > limit // size:
        raise _err(f"Vector index initial capacity {params.initial_cap} exceeded server limit "
                   f"({limit // size} with the given parameters)")
    if params.block_size and params.block_size > limit // 10 // size:
        raise _err(f"Vector index block size {params.block_size} exceeded server limit "
                   f"({limit // 10 // size} with the given parameters)")
