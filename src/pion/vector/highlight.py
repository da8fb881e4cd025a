"""FT.SEARCH HIGHLIGHT and SUMMARIZE, as RediSearch 2.10 builds them.

RediSearch fragments a returned field from the byte offsets it stores per indexed token. Pion's
index keeps token positions but not byte offsets, so the returned documents' fields are
re-tokenised here at reply time (only theirs, only the fields asked for), with the index's
separators, escapes and stop-words, and each token is checked against the index terms the query
matched in that document (the word itself, its stem ``+root``, a prefix's or fuzzy term's
expansions): the same terms whose offsets RediSearch would read. As there, a term that matched
the document is highlighted wherever it occurs in the document's TEXT fields.

Fragments follow RediSearch's fragmenter: matches at most 8 positions apart join one fragment,
a fragment scores the IDF of its distinct terms, the best FRAGS are kept in document order, each
widened by about LEN tokens of context (6 bytes a token, cut back to whole words), whitespace
runs folded to one space, each followed by the separator. A field with no match is cut to its
first LEN*FRAGS tokens' worth of bytes when only SUMMARIZE applies to it, and kept when HIGHLIGHT
does.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

from pion.protocol.errors import ReplyError
from pion.vector import chinese, query_exec, text
from pion.vector.query_parser import Node

HIGHLIGHT = 1
SUMMARIZE = 2
DEFAULT_TAGS = (b"<b>", b"</b>")
DEFAULT_FRAGS = 3
DEFAULT_LEN = 20
DEFAULT_SEPARATOR = b"... "
#: RediSearch's FragmentList_Init(8, 6): the longest gap inside a fragment, bytes per context token
MAX_DISTANCE = 8
WORD_BYTES = 6
_SEPS = frozenset(ord(c) for c in text.SEPARATORS)
_SPACES = frozenset(b" \t\n\v\f\r")
_BACKSLASH = ord("\\")


@dataclass
class FieldSettings:
    mode: int = 0
    tags: tuple[bytes, bytes] = DEFAULT_TAGS
    frags: int = DEFAULT_FRAGS
    length: int = DEFAULT_LEN
    separator: bytes = DEFAULT_SEPARATOR


@dataclass
class Summary:
    """What HIGHLIGHT and SUMMARIZE asked: settings for every field (``default``) and per named field."""
    default: FieldSettings = field(default_factory=FieldSettings)
    fields: dict[str, FieldSettings] = field(default_factory=dict)
    #: RETURN's and FIELDS' names in the order they were given (RediSearch's field list order)
    order: list[str] = field(default_factory=list)


def mention(names: list[str], order: list[str]) -> None:
    """A RETURN clause's names join the field list (its order decides the reply's field order)."""
    for name in names:
        if name not in order:
            order.append(name)


def _count(argv: list[bytes], i: int, what: str) -> int:
    try:
        value = int(argv[i])
    except (IndexError, ValueError):
        raise ReplyError(f"Bad arguments for {what}") from None
    if value < 0:
        raise ReplyError(f"Bad arguments for {what}")
    return value


def parse(argv: list[bytes], i: int, summary: Summary, order: list[str]) -> int:
    """HIGHLIGHT [FIELDS n f ...] [TAGS open close] or SUMMARIZE [FIELDS n f ...] [FRAGS n] [LEN n]
    [SEPARATOR s] at argv[i]; returns the index after it."""
    word = argv[i].upper()
    what = word.decode()
    mode = HIGHLIGHT if word == b"HIGHLIGHT" else SUMMARIZE
    i += 1
    names: list[str] | None = None
    settings = FieldSettings()
    n = len(argv)
    while i < n:
        option = argv[i].upper()
        if option == b"FIELDS":
            count = _count(argv, i + 1, what)
            if i + 2 + count > n:
                raise ReplyError(f"Bad arguments for {what}")
            names = [a.decode("utf-8", "replace") for a in argv[i + 2:i + 2 + count]]
            i += 2 + count
        elif mode == HIGHLIGHT and option == b"TAGS":
            if i + 2 >= n:
                raise ReplyError(f"Bad arguments for {what}")
            settings.tags = (bytes(argv[i + 1]), bytes(argv[i + 2]))
            i += 3
        elif mode == SUMMARIZE and option in (b"FRAGS", b"LEN"):
            value = _count(argv, i + 1, what)
            if option == b"FRAGS":
                settings.frags = value
            else:
                settings.length = value
            i += 2
        elif mode == SUMMARIZE and option == b"SEPARATOR":
            if i + 1 >= n:
                raise ReplyError(f"Bad arguments for {what}")
            settings.separator = bytes(argv[i + 1])
            i += 2
        else:
            break
    targets = [summary.default] if not names else []
    for name in names or ():
        mention([name], order)
        targets.append(summary.fields.setdefault(name, FieldSettings()))
    for target in targets:
        target.mode |= mode
        if mode == HIGHLIGHT:
            target.tags = settings.tags
        else:
            target.frags, target.length, target.separator = settings.frags, settings.length, settings.separator
    return i


def check(index, summary: Summary, returns: list[tuple[str, str]] | None) -> None:
    """FIELDS must name the index's attributes (RediSearch: ``No such property``); with these
    options RediSearch 2.10 also refuses a RETURN name that is not one (a raw field, a JSONPath, a
    KNN distance): ``Property `x` is not in schema``. An index created with NOOFFSETS or NOHL keeps
    no offsets for them (RediSearch's text names NOOFFSETS for both)."""
    if index.definition.options & {"NOOFFSETS", "NOHL"}:
        raise ReplyError("Cannot use highlight/summarize because NOOFSETS was specified at index level")
    for name in summary.fields:
        if index.definition.field(name) is None:
            raise ReplyError(f"No such property `{name}`")
    for name, _ in returns or ():
        if index.definition.field(name) is None:
            raise ReplyError(f"Property `{name}` is not in schema")


# -- the terms a document matched ---------------------------------------------------------------------


def matched_terms(root: Node, ctx: query_exec.ExecContext, doc: int) -> set[str]:
    """The index terms (words, ``+stems``, expansions) through which the query matched ``doc``;
    a term counts where the document has it in a field the query node may read."""
    out: set[str] = set()
    _collect(root, ctx, ctx.infields, doc, out)
    return out


def _has(ctx: query_exec.ExecContext, term: str, doc: int, mask: int | None) -> bool:
    plist = ctx.index.text.postings.get(term)
    posting = plist.get(doc) if plist is not None else None
    return posting is not None and (mask is None or bool(posting.mask & mask))


def _collect(node: Node, ctx: query_exec.ExecContext, fields: list[str] | None, doc: int, out: set[str]) -> None:
    kind = node.kind
    if kind == "fields":
        _collect(node.children[0], ctx, query_exec._restrict(ctx, node.fields, node, fields), doc, out)
        return
    if kind in ("and", "or", "opt"):
        for child in node.children:
            _collect(child, ctx, fields, doc, out)
        return
    mask = query_exec._field_mask(ctx, fields)
    if kind == "term":
        if query_exec._is_stopword(ctx, node.value):
            return
        expand = not node.attrs.get("exact")
        words = chinese.query_words(node.value) if query_exec._segmented(ctx) else (node.value,)
        names = [name for word in words for name in query_exec.posting_names(ctx, word, expand, fields)]
    elif kind == "phrase":
        phrase: list[str] = list(node.value)
        if query_exec._segmented(ctx):
            phrase = [part for w in phrase for part in chinese.query_words(w)]
        names = [w for w in phrase if w in ctx.index.text.postings]
    elif kind in ("prefix", "suffix", "infix", "fuzzy", "wildcard"):
        names = query_exec.expansion_terms(node, ctx)
    else:  # tags, numbers, geo, vectors, negations: no text offsets
        return
    for name in names:
        if _has(ctx, name, doc, mask):
            out.add(name)


def idf(index, term: str) -> float:
    """RediSearch's fragment score per term: logb(1 + N / df)."""
    df = len(index.text.postings.get(term, ())) or 1
    return float(math.floor(math.log2(1.0 + len(index.docs) / df)))


# -- fragments ------------------------------------------------------------------------------------------


@dataclass
class Fragment:
    start: int
    end: int
    last_pos: int
    score: float = 0.0
    total_tokens: int = 0
    matches: int = 0
    terms: list[str] = field(default_factory=list)
    locs: list[tuple[int, int]] = field(default_factory=list)  # (byte start, byte end) of each match


_WORD = re.compile(b"[^" + re.escape(bytes(sorted(_SEPS))) + b"]+")


def tokens(raw: bytes, stopwords: frozenset[str]):
    """(byte start, byte end up to the next separator, lower-cased token) of each indexed token."""
    if b"\\" not in raw:  # no escapes: a token is a run of non-separators (the common case, by regex)
        for match in _WORD.finditer(raw):
            word = text.fold(match.group().decode("utf-8", "replace"))
            if word not in stopwords:
                yield match.start(), match.end(), word
        return
    i, n = 0, len(raw)
    while i < n:
        if raw[i] in _SEPS and not (raw[i] == _BACKSLASH and i + 1 < n):
            i += 1
            continue
        start = i
        chars = bytearray()
        while i < n:
            if raw[i] == _BACKSLASH and i + 1 < n:  # an escaped character stays in the token
                chars.append(raw[i + 1])
                i += 2
                continue
            if raw[i] in _SEPS:
                break
            chars.append(raw[i])
            i += 1
        end = start
        while end < n and raw[end] not in _SEPS:
            end += 1
        word = text.fold(chars.decode("utf-8", "replace"))
        if word in stopwords:
            continue
        yield start, end, word


def chinese_tokens(raw: bytes, stopwords: frozenset[str]):
    """``tokens`` for LANGUAGE chinese: Chinese runs cut into words as the index cut them (each
    token exactly its word, as RediSearch's exact token lengths there), the rest as ``tokens``."""
    value = raw.decode("utf-8", "surrogateescape")
    if not chinese.has_cjk(value):
        yield from tokens(raw, stopwords)
        return
    try:
        pieces = chinese._segmenter().cut(value, HMM=True)
    except chinese.SegmenterMissing:
        yield from tokens(raw, stopwords)
        return
    offset = 0
    for piece in pieces:
        encoded = piece.encode("utf-8", "surrogateescape")
        if chinese.has_cjk(piece):
            if text.fold(piece) not in stopwords:
                yield offset, offset + len(encoded), text.fold(piece)
        elif not piece.isspace():
            for start, end, word in tokens(encoded, stopwords):
                yield offset + start, offset + end, word
        offset += len(encoded)


def fragments(raw: bytes, terms: set[str], index, stem_language: str | None,
              segmented: bool = False) -> list[Fragment]:
    """RediSearch's fragmenter over one field's text: matches of ``terms`` grouped into fragments."""
    frags: list[Fragment] = []
    since_last = 0
    stopwords = index.definition.stopword_set
    scores: dict[str, float] = {}
    found = chinese_tokens(raw, stopwords) if segmented else tokens(raw, stopwords)
    for pos, (start, end, word) in enumerate(found):
        term = word if word in terms else None
        if term is None and stem_language is not None:
            root = text.stem(word, stem_language)
            if root is not None and text.STEM_PREFIX + root in terms:
                term = text.STEM_PREFIX + root
        if term is None:
            since_last += 1
            continue
        cur = frags[-1] if frags else None
        if cur is not None and pos - cur.last_pos > MAX_DISTANCE:
            cur = None
        if cur is None:
            cur = Fragment(start=start, end=end, last_pos=pos)
            frags.append(cur)
            since_last = 0
        if term not in cur.terms:
            if term not in scores:
                scores[term] = idf(index, term)
            cur.score += scores[term]
        cur.terms.append(term)
        cur.end = end
        cur.last_pos = pos
        cur.matches += 1
        cur.total_tokens += since_last + 1
        since_last = 0
        cur.locs.append((start, end))
    return frags


def _tagged(raw: bytes, frag: Fragment, tags: tuple[bytes, bytes] | None, out: bytearray, cursor: int) -> int:
    for start, end in frag.locs:
        out += raw[cursor:start]
        if tags is not None:
            out += tags[0]
        out += raw[start:end]
        if tags is not None:
            out += tags[1]
        cursor = end
    return cursor


def highlight_whole(raw: bytes, frags: list[Fragment], tags: tuple[bytes, bytes]) -> bytes:
    out = bytearray()
    cursor = 0
    for frag in frags:
        cursor = _tagged(raw, frag, tags, out, cursor)
    out += raw[cursor:]
    return bytes(out)


_SPACE_RUN = re.compile(rb"[ \t\n\v\f\r]+")


def _fold_spaces(chunk: bytes) -> bytes:
    """Each run of whitespace as one space (RediSearch's stripDuplicateSpaces)."""
    return _SPACE_RUN.sub(b" ", chunk)


def _context(raw: bytes, frag: Fragment, lo: int | None, hi: int | None, size: int) -> tuple[int, int]:
    """The byte range of a fragment with its context (RediSearch's FragmentList_FindContext)."""
    lo = 0 if lo is None else lo
    hi = len(raw) - 1 if hi is None else hi
    inside = frag.total_tokens - frag.matches
    if size <= inside:
        return frag.start, frag.end
    size = (size - inside) // 2 * WORD_BYTES
    lo = max(frag.start - size, lo)
    hi = min(frag.end + size, hi)
    while lo < frag.start and raw[lo] not in _SEPS:
        lo += 1
    while lo < frag.start and raw[lo] in _SEPS:
        lo += 1
    while hi > frag.end and raw[hi] not in _SEPS:
        hi -= 1
    while hi > frag.end and raw[hi] in _SEPS:
        hi -= 1
    return lo, hi + 1


def summarize(raw: bytes, frags: list[Fragment], settings: FieldSettings, tags: tuple[bytes, bytes] | None) -> bytes:
    count = min(settings.frags, len(frags))
    best = sorted(range(len(frags)), key=lambda k: (-frags[k].score, k))[:count]
    chosen = [frags[k] for k in sorted(best)]
    out = bytearray()
    for k, frag in enumerate(chosen):
        lo = chosen[k - 1].end if k > 0 else None
        hi = chosen[k + 1].start if k + 1 < len(chosen) else None
        start, end = _context(raw, frag, lo, hi, settings.length)
        piece = bytearray(raw[start:frag.start])
        cursor = _tagged(raw, frag, tags, piece, frag.start)
        piece += raw[cursor:end]
        out += _fold_spaces(bytes(piece))
        out += settings.separator
    return bytes(out)


def trim(raw: bytes, settings: FieldSettings) -> bytes:
    """A field SUMMARIZE found nothing in: its head, about LEN*FRAGS tokens, cut after a separator."""
    head = min(WORD_BYTES * settings.length * settings.frags + WORD_BYTES, len(raw))
    buf = _fold_spaces(raw[:head])
    n = len(buf)
    while n > 1 and buf[n - 1] not in _SEPS:
        n -= 1
    while n and buf[n - 1] in _SPACES:
        n -= 1
    return buf[:n]


# -- the reply's fields ---------------------------------------------------------------------------------


def _settings_for(summary: Summary, name: str) -> FieldSettings | None:
    own = summary.fields.get(name)
    base = summary.default
    if own is None:
        return base if base.mode else None
    if not (own.mode | base.mode):
        return None
    merged = FieldSettings(mode=own.mode | base.mode)
    hl = own if own.mode & HIGHLIGHT else base
    sm = own if own.mode & SUMMARIZE else base
    merged.tags = hl.tags
    merged.frags, merged.length, merged.separator = sm.frags, sm.length, sm.separator
    return merged


def order_fields(fields: list[tuple[bytes, Any]], summary: Summary, order: list[str],
                 returns_given: bool, sortby: str | None = None) -> list[tuple[bytes, Any]]:
    """RediSearch's field order with these options: its field list (RETURN's and FIELDS' names, in
    the order given) first, then, without RETURN, the document's other fields; SORTBY's before all."""
    if not order:
        return fields
    rank = {name.encode(): k for k, name in enumerate(order)}
    if sortby is not None:  # the SORTBY property stays first, as without these options
        rank[sortby.encode()] = -1
    if returns_given:
        return sorted(fields, key=lambda item: rank.get(item[0], len(rank)))
    named = sorted((item for item in fields if item[0] in rank), key=lambda item: rank[item[0]])
    return named + [item for item in fields if item[0] not in rank]


def apply(index, summary: Summary, order: list[str], terms: set[str], fields: list[tuple[bytes, Any]],
          is_json: bool, language: str | None, sortby: str | None = None,
          computed: frozenset[bytes] = frozenset()) -> list[tuple[bytes, Any]]:
    """A result's fields with HIGHLIGHT/SUMMARIZE applied (``terms``: ``matched_terms``). A NUMERIC
    SORTBY property is a number in RediSearch's row (read from its sort vector), never cut; nor are
    ``computed`` values (a KNN distance)."""
    listed = {name.encode() for name in order}
    out = []
    for name, value in fields:
        if not isinstance(value, bytes) or name in computed or (listed and name not in listed):
            out.append((name, value))
            continue
        key = name.decode("utf-8", "replace")
        settings = _settings_for(summary, key)
        spec = index.definition.field(key)
        numeric_sortkey = key == sortby and spec is not None and spec.type == "NUMERIC"
        if settings is None or numeric_sortkey or (is_json and (spec is None or spec.type not in ("TEXT", "TAG"))):
            out.append((name, value))
            continue
        frags: list[Fragment] = []
        if spec is not None and spec.type == "TEXT" and terms:
            lang = language or index.definition.language
            segmented = lang == chinese.LANGUAGE
            stem_language = None if spec.nostem or segmented else lang
            frags = fragments(value, terms, index, stem_language, segmented)
        if not frags:
            out.append((name, trim(value, settings) if settings.mode == SUMMARIZE else value))
        elif settings.mode == HIGHLIGHT:
            out.append((name, highlight_whole(value, frags, settings.tags)))
        else:
            tags = settings.tags if settings.mode & HIGHLIGHT else None
            out.append((name, summarize(value, frags, settings, tags)))
    return out


__all__ = ["Summary", "apply", "check", "matched_terms", "mention", "order_fields", "parse"]
