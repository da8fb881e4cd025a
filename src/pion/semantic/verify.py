"""Verification of a semantic-cache candidate: the vector match proposes, this stage disposes.

Why: a bi-encoder puts "Convert 10 km to miles" and "Convert 10 miles to km" at cosine 0.99, and
"when does the store close" beside "... open": no threshold separates a paraphrase from the
reversed, negated or entity-swapped question. So a candidate above the threshold is a hit only
when the parts of the two texts that carry the meaning agree (``verify``). Each check is one
*category*, named in the refusal's reason (``WITHREASON``):

- ``numbers``: the multisets of numbers (digits, number words and Roman numerals: "ten" = "10",
  "World War II" = 2; a percentage is its own kind of number: "15% of 80" is not "80% of 15");
- ``units``: the units named, when both texts name one (km, miles, Celsius, dollars, cups ...);
- ``negation``: one text negates (not, never, without, n't, egg-free ...) and the other does not;
- ``comparison`` / ``direction`` / ``operator``: both texts name an axis of an opposition
  (bigger/smaller, longest/widest, north/south, upload/download, open/close, raw/cooked, buy/sell,
  before/after, min/max, ascending/descending ...) and name different poles of it (``pion.semantic.lexicon``);
- ``order``: the two sides of "X to Y", "from X to Y", "X into Y", "how many X in Y", "X than Y"
  are swapped (a word is the source in one text and the target in the other);
- ``time``: the times differ (today/tomorrow/yesterday, weekdays, months, years, next/last week;
  a question that names no time asks about now);
- ``question``: the question asks for another kind of answer (who vs when vs where vs why vs how many);
- ``entity``: a name, quoted literal or other capitalised or rare-shaped token (an acronym, digits
  inside a word, code like ``np.array``, a language, country, city or tool from the gazetteer) of one
  text is absent from the other (an acronym matches the initials of words: DST = daylight saving time);
- ``substitution``: the texts are the same question but for one or two words swapped for others
  ("in the oven" / "in the microwave", "cats" / "dogs"): the template is the same and the thing asked
  about is not. A paraphrase that rewords the whole question is not refused by it.

A check only refuses on what the texts *say*: a word one text has and the other lacks is not a
conflict unless it is a number, negation, time, entity, or a swap in the same sentence. The
tokenizer is a small regular expression and word forms go through the Snowball English stemmer
(``pion.vector.text.stem``, the one FT.* TEXT fields use): the checks are lists, not a model, so
a reason is exact and a verification costs tens of microseconds.

``VERIFY model`` runs the same checks, but a ``substitution`` (the one check a list cannot settle:
is "shares" another word for "stock"?) is put to the embedding model: each swapped word must have
a counterpart among the other text's words whose word embedding is at least ``WORD_MATCH`` close
("shares" ~ "stock"); "oven" and "microwave" are not, and stay refused.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from pion.semantic import lexicon as lx
from pion.vector.text import stem as _stem

MODES = ("off", "lexical", "model")
DEFAULT_MODE = "lexical"
#: model mode: a swapped word needs a counterpart at least this close (word-embedding cosine)
WORD_MATCH = 0.65
#: a substitution is a swap of at most this many words per side in an otherwise shared question
SWAP_WORDS = 2

_TOKEN = re.compile(r"""
    (?P<quote>"[^"]{1,80}"|“[^”]{1,80}”|(?<![A-Za-z])'[^']{1,80}'(?![A-Za-z]))
  | (?P<code>[A-Za-z_][A-Za-z0-9_]*(?:(?:\.|::)[A-Za-z_][A-Za-z0-9_]*)+(?:\(\))?|[A-Za-z]\+\+|[A-Za-z]\#)
  | (?P<num>\d+(?:[.,]\d+)*(?![A-Za-z0-9]))
  | (?P<word>[A-Za-z0-9]+(?:'[A-Za-z]+)?)
  | (?P<sym>°[CcFf]|[$€£¥%+*/×÷^=<>→-]|[.?!:;()])
""", re.VERBOSE)
_SENTENCE_END = frozenset(".?!:;()")
_DIGITS_LETTERS = re.compile(r"(\d+(?:\.\d+)?)([A-Za-z]+)$")
_ORDINAL_SUFFIX = frozenset({"st", "nd", "rd", "th"})
_DETERMINERS = frozenset("the a an my your our their his her its this that some".split())
_ARITH_SYMBOLS = frozenset("+ - * / × ÷ ^ x".split())
#: number words that are usually not numbers ("which one", "a couple of", "double-check")
_AMBIGUOUS_NUMBERS = frozenset("one single couple pair double half quarter".split())
_ARITH_WORDS = frozenset("plus minus times + - * / × ÷ by divided multiplied x of".split())


_DURATION_UNITS = frozenset({"second", "minute", "hour", "day", "week", "month", "year"})


def _build_index(groups: dict[str, str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for canonical, forms in groups.items():
        for form in forms.split():
            out[form.replace("_", " ")] = canonical
    return out


_UNIT_OF = _build_index(lx.UNITS)
_TIME_OF = _build_index(lx.TIMES)
#: units that are English words too: a unit only after a number ("a second", "in a minute" are)
_WORDY_UNITS = frozenset("second seconds minute minutes day days week weeks month months year years m g l mi "
                         "cup cups stone stones pound pounds bit bits cal".split())


_UNIT_SLOT_BEFORE = frozenset("many much per a an one in to into from of".split())


def stem(word: str) -> str:
    """The word's Snowball stem, or its lemma for an irregular verb form ("wrote" -> "write")."""
    lemma = lx.IRREGULAR.get(word)
    return lemma if lemma is not None else _stem(word) or word


def _inflections(form: str) -> set[str]:
    """A listed word and its regular inflections (open: opens, opened, opening). Exact forms, not
    stems: "cook" must not count as "cooked"."""
    out = {form}
    if form.isalpha() and len(form) > 2:
        base = form[:-1] if form.endswith("e") else form
        out |= {form + "s", form + "es", base + "ing", form + "d" if form.endswith("e") else form + "ed"}
    return out


@lru_cache(maxsize=1)
def _poles() -> dict[str, list[tuple[str, str, int]]]:
    """word form -> [(category, axis, pole)]."""
    out: dict[str, list[tuple[str, str, int]]] = {}
    for category, axes in lx.OPPOSITIONS.items():
        for axis, poles in axes.items():
            for pole, forms in enumerate(poles):
                for form in forms.split():
                    for key in _inflections(form.replace("_", " ")):
                        entry = (category, axis, pole)
                        if entry not in out.setdefault(key, []):
                            out[key].append(entry)
    return out


@dataclass(frozen=True)
class Verdict:
    ok: bool
    category: str = ""
    reason: str = ""

    def text(self) -> str:
        return "verified" if self.ok else f"{self.category}: {self.reason}"


ACCEPT = Verdict(True)


@dataclass
class Token:
    text: str  # as written
    low: str
    kind: str  # quote num code word sym
    initial: bool  # first word of a sentence

    @property
    def root(self) -> str:
        return stem(self.low)


@dataclass
class Features:
    """What carries a text's meaning, read once per text (``features``)."""

    numbers: Counter = field(default_factory=Counter)
    units: set[str] = field(default_factory=set)
    negators: list[str] = field(default_factory=list)
    poles: dict[tuple[str, str], set[int]] = field(default_factory=dict)
    pole_words: dict[tuple[str, str, int], str] = field(default_factory=dict)
    roles: dict[str, str] = field(default_factory=dict)  # anchor -> src | dst | lhs | rhs
    times: set[str] = field(default_factory=set)
    kinds: set[str] = field(default_factory=set)
    entities: dict[str, str] = field(default_factory=dict)  # root -> as written
    roots: set[str] = field(default_factory=set)  # every word's stem and lower form
    initials: str = ""  # first letters of the words, for acronyms
    content: dict[str, str] = field(default_factory=dict)  # content word stem -> lower form


def tokenize(text: str) -> list[Token]:
    tokens: list[Token] = []
    initial = True
    for match in _TOKEN.finditer(text.replace("’", "'")):
        kind = match.lastgroup or "word"
        raw = match.group()
        if kind == "sym" and raw in _SENTENCE_END:
            initial = True
            continue
        if kind == "word":
            if raw.lower().endswith("'s"):
                raw = raw[:-2]
            split = _DIGITS_LETTERS.match(raw)
            if split and (split.group(2).lower() in _UNIT_OF or split.group(2).lower() in _ORDINAL_SUFFIX):
                tokens.append(Token(split.group(1), split.group(1), "num", initial))
                if split.group(2).lower() in _UNIT_OF:
                    tokens.append(Token(split.group(2), split.group(2).lower(), "word", False))
                initial = False
                continue
        tokens.append(Token(raw, raw.lower(), kind, initial))
        if kind != "sym":
            initial = False
    return tokens


def _number(text: str) -> str:
    digits = text.replace(",", "")
    try:
        value = float(digits)
    except ValueError:
        return text
    return repr(int(value)) if value.is_integer() else repr(value)


def _is_year(text: str) -> bool:
    return len(text) == 4 and text.isdigit() and 1000 <= int(text) <= 2199


def _numeric_context(tokens: list[Token], i: int) -> bool:
    """Is the ambiguous number word at ``i`` a number: next to a number or an arithmetic word?"""
    for j in (i - 1, i + 1):
        if 0 <= j < len(tokens) and (tokens[j].kind == "num" or tokens[j].low in _ARITH_WORDS - {"of", "by"}):
            return True
    return False


def _is_num(tok: Token | None) -> bool:
    return tok is not None and (tok.kind == "num" or tok.low in lx.NUMBER_WORDS)


def _entity_shaped(tok: Token) -> bool:
    """A name or rare token by its shape: capitalised inside a sentence, an acronym, a mixed-case or
    digit-bearing word, code, a quoted literal, or a name from the gazetteer."""
    if tok.kind in ("quote", "code"):
        return True
    if tok.kind != "word":
        return False
    if tok.low in lx.GAZETTEER:
        return True
    text = tok.text
    if tok.low in lx.GENERIC_CAPITALISED or tok.low in lx.STOPWORDS:
        return False
    if any(ch.isdigit() for ch in text) and any(ch.isalpha() for ch in text):
        return True
    if len(text) >= 2 and text.isupper():
        return True
    if any(ch.isupper() for ch in text[1:]):
        return True  # JavaScript, iPhone
    return text[0].isupper() and not tok.initial


def _unit_at(tokens: list[Token], i: int) -> str | None:
    """The unit ``tokens[i]`` names (a word like "second" or "cup" only after a number or "how many")."""
    tok = tokens[i]
    unit = _UNIT_OF.get(tok.low)
    if unit is None:
        return None
    if tok.low in _WORDY_UNITS:
        prev = tokens[i - 1] if i > 0 else None
        nxt = tokens[i + 1] if i + 1 < len(tokens) else None
        if not (_is_num(prev) or prev is not None and prev.low in _UNIT_SLOT_BEFORE
                or nxt is not None and nxt.low in ("to", "into", "per")):
            return None
    return unit


def _word_at(tokens: list[Token], i: int, step: int) -> tuple[str | None, int]:
    """The anchor word at ``i`` going ``step`` (+1 after, -1 before), skipping determiners: a unit, a
    name (several capitalised words), or a content word; (None, i) when a stopword stands there."""
    while 0 <= i < len(tokens) and tokens[i].low in _DETERMINERS:
        i += step
    if not 0 <= i < len(tokens):
        return None, i
    tok = tokens[i]
    if tok.kind == "num" and 0 <= i + step < len(tokens) and step > 0:
        nxt = tokens[i + 1]
        unit = _UNIT_OF.get(nxt.low)
        return (unit or nxt.root if nxt.kind == "word" else None), i + 1
    if tok.kind == "sym" or tok.kind == "num":
        return None, i
    unit = _UNIT_OF.get(tok.low)
    if unit is not None:
        return unit, i
    if tok.low in lx.STOPWORDS:
        return None, i
    if tok.text[:1].isupper() and tok.kind == "word":  # a name of several words: "New York"
        start = end = i
        while end + 1 < len(tokens) and tokens[end + 1].text[:1].isupper() and tokens[end + 1].kind == "word":
            end += 1
        while start - 1 >= 0 and tokens[start - 1].text[:1].isupper() and tokens[start - 1].kind == "word" \
                and not tokens[start - 1].initial:
            start -= 1
        if end > start:
            return " ".join(t.low for t in tokens[start:end + 1]), (end if step > 0 else start)
    return tok.root, i


def _roles(tokens: list[Token]) -> dict[str, str]:
    roles: dict[str, str] = {}
    lows = [t.low for t in tokens]

    def put(anchor: str | None, role: str) -> None:
        if anchor and anchor not in roles:
            roles[anchor] = role

    asked_unit = None
    for i, low in enumerate(lows):
        if low == "how" and i + 2 < len(tokens) and lows[i + 1] in ("many", "much") and lows[i + 2] in _UNIT_OF:
            asked_unit = _UNIT_OF[lows[i + 2]]
            put(asked_unit, "dst")
    for i, low in enumerate(lows):
        if low == "from":
            put(_word_at(tokens, i + 1, 1)[0], "src")
        elif low in ("to", "into", "→", "towards"):
            after, _ = _word_at(tokens, i + 1, 1)
            before, _ = _word_at(tokens, i - 1, -1)
            if after is not None:
                put(after, "dst")
                put(before, "src")
        elif low in ("in", "per", "make") and asked_unit is not None:
            after, _ = _word_at(tokens, i + 1, 1)
            if after is not None and after != asked_unit and after in lx.UNITS:
                put(after, "src")
        elif low == "than":
            j = i - 1
            while j >= 0 and (lows[j] in _poles() or lows[j] in lx.STOPWORDS):
                j -= 1
            before, _ = _word_at(tokens, j, -1)
            after, _ = _word_at(tokens, i + 1, 1)
            if before is not None and after is not None:
                put(before, "lhs")
                put(after, "rhs")
    return roles


#: the verifier reads this many characters of a text (the embedding model reads its first 256
#: tokens, about 1000 characters, so a difference past this point is one the vector never saw
#: either); it bounds the time on the event loop and the per-text cache's memory
MAX_CHARS = 2000


def features(text: str) -> Features:
    return _features_cached(text[:MAX_CHARS])


@lru_cache(maxsize=4096)
def _features_cached(text: str) -> Features:  # noqa: C901 - one pass over the tokens, one branch per kind
    tokens = tokenize(text)
    out = Features()
    poles = _poles()
    skip = -1
    words = [t for t in tokens if t.kind == "word"]
    out.initials = "".join(t.low[0] for t in words)
    for i, tok in enumerate(tokens):
        low, root = tok.low, tok.root
        out.roots.update((low, root))
        if i <= skip:
            continue
        prev = tokens[i - 1] if i > 0 else None
        nxt = tokens[i + 1] if i + 1 < len(tokens) else None
        if tok.kind == "quote":
            out.entities[tok.low.strip("\"'“”")] = tok.text
            continue
        if _is_num(tok):
            value = _number(tok.text) if tok.kind == "num" else lx.NUMBER_WORDS[low]
            if nxt is not None and nxt.low in ("%", "percent", "percentage", "pct"):
                out.numbers[value + "%"] += 1
                skip = i + 1
            elif tok.kind == "num" and _is_year(tok.text) and not (nxt is not None and nxt.low in _UNIT_OF):
                out.times.add(tok.text)
            elif low not in _AMBIGUOUS_NUMBERS or _numeric_context(tokens, i):
                out.numbers[value] += 1
            continue
        if low in lx.ORDINALS and not _is_num(prev):
            out.numbers[lx.ORDINALS[low].lstrip("#")] += 1
            continue
        if low in lx.ROMAN and tok.text.isupper() and prev is not None and prev.text[:1].isupper():
            out.numbers[lx.ROMAN[low]] += 1
            continue
        if tok.kind == "sym" and low == "-" and nxt is not None and nxt.low == "free":
            out.negators.append(f"-{nxt.low}")
            skip = i + 1
            continue
        unit = _unit_at(tokens, i)
        if unit is not None:
            out.units.add(unit)
            continue
        if low in lx.TIME_SHIFTS and nxt is not None and nxt.low in lx.TIME_PERIODS:
            out.times.add(f"{lx.TIME_SHIFTS[low]} {_TIME_OF.get(nxt.low, nxt.low)}")
            skip = i + 1
            continue
        if low == "right" and nxt is not None and nxt.low == "now":
            continue
        if low in _TIME_OF and (low not in lx.CAPITALISED_TIMES or tok.text[0].isupper()):
            out.times.add(_TIME_OF[low])
            continue
        if low in lx.NEGATORS or low.endswith("n't") or low.startswith("non") and len(low) > 5:
            out.negators.append(low)
            continue
        if low in lx.QUESTION_KINDS:
            out.kinds.add(lx.QUESTION_KINDS[low])
        if nxt is not None and (low, nxt.low) in lx.QUESTION_PAIRS:
            kind = lx.QUESTION_PAIRS[(low, nxt.low)]
            after = tokens[i + 2].low if i + 2 < len(tokens) else ""
            if kind == "quantity" and _UNIT_OF.get(after) in _DURATION_UNITS:
                kind = "duration"  # "how many minutes" asks what "how long" asks
            out.kinds.add(kind)
        if tok.kind == "sym" and low in _ARITH_SYMBOLS or low == "x":
            if not (_is_num(prev) and _is_num(nxt)):
                continue
            low = {"x": "*", "×": "*", "÷": "/"}.get(low, low)
        on_axis = False
        if nxt is not None and f"{low} {nxt.low}" in poles:  # two-word forms: "log out", "switch on"
            low = f"{low} {nxt.low}"
            skip = i + 1
        for category, axis, pole in poles.get(low, ()):
            on_axis = True
            out.poles.setdefault((category, axis), set()).add(pole)
            out.pole_words.setdefault((category, axis, pole), tok.text)
        if on_axis or tok.kind == "sym":
            continue
        if _entity_shaped(tok):
            out.entities[root] = tok.text
        if low not in lx.STOPWORDS and low not in lx.GENERIC_CAPITALISED and len(low) > 1 and not low.isdigit():
            out.content[root] = low
    if not out.times:
        out.times.add("now")
    out.times = {"now" if t in lx.PRESENT else t for t in out.times}
    out.roles = _roles(tokens)
    return out


def _show(counter: Counter) -> str:
    return ", ".join(sorted(counter.elements())) or "none"


def _entity_missing(a: Features, b: Features) -> str | None:
    for root, written in a.entities.items():
        parts = root.split()
        if all(p in b.roots or stem(p) in b.roots for p in parts) or root in b.entities:
            continue
        if written.isupper() and 2 <= len(written) <= 6 and written.lower() in b.initials:
            continue  # an acronym of words the other text spells out
        return written
    return None


def _has_word(f: Features, root: str, word: str) -> bool:
    """Does ``f`` have the word (its form or stem, or a form sharing a long prefix: painter/painted)?"""
    if root in f.roots or word in f.roots:
        return True
    if len(word) < 6:
        return False
    head = word[:max(5, int(len(word) * 0.75))]
    return any(len(other) >= 6 and other.startswith(head) for other in f.content.values())


def swapped_words(q: Features, c: Features) -> tuple[list[str], list[str]] | None:
    """The words swapped when the two texts are one question but for a few words (None: not a swap)."""
    ours = [w for r, w in q.content.items() if not _has_word(c, r, w)]
    theirs = [w for r, w in c.content.items() if not _has_word(q, r, w)]
    shared = sum(1 for r, w in q.content.items() if _has_word(c, r, w))
    shared += sum((q.numbers & c.numbers).values())
    if ours and theirs and len(ours) <= SWAP_WORDS and len(theirs) <= SWAP_WORDS and shared >= 2:
        return ours, theirs
    return None


def lexical(query: str, cached: str) -> Verdict:
    """Every check but the substitution's word alignment; the first disagreement refuses."""
    verdict = _hard(query, cached)
    if not verdict.ok:
        return verdict
    swap = swapped_words(features(query), features(cached))
    if swap is not None:
        return Verdict(False, "substitution", f"the query says {'/'.join(swap[0])} where the cached prompt says "
                                              f"{'/'.join(swap[1])}")
    return ACCEPT


def _hard(query: str, cached: str) -> Verdict:  # noqa: C901 - one check per category, in a fixed order
    if query == cached:
        return ACCEPT
    q, c = features(query), features(cached)
    if q is c:
        return ACCEPT  # the same first MAX_CHARS characters
    if q.numbers != c.numbers:
        return Verdict(False, "numbers", f"the query has {_show(q.numbers)}, the cached prompt {_show(c.numbers)}")
    if q.units and c.units and q.units != c.units:
        return Verdict(False, "units", f"the query names {', '.join(sorted(q.units))}, "
                                       f"the cached prompt {', '.join(sorted(c.units))}")
    if bool(q.negators) != bool(c.negators):
        side = "query" if q.negators else "cached prompt"
        words = q.negators or c.negators
        return Verdict(False, "negation", f"only the {side} negates ({', '.join(words)})")
    for (category, axis), poles in q.poles.items():
        other = c.poles.get((category, axis))
        if other is not None and other != poles:
            qw = "/".join(q.pole_words[(category, axis, p)] for p in sorted(poles))
            cw = "/".join(c.pole_words[(category, axis, p)] for p in sorted(other))
            return Verdict(False, category, f"the query says '{qw}', the cached prompt '{cw}' ({axis})")
    for anchor, role in q.roles.items():
        other_role = c.roles.get(anchor)
        if other_role is not None and other_role != role:
            return Verdict(False, "order", f"'{anchor}' is the {_ROLE[role]} in the query but the "
                                           f"{_ROLE[other_role]} in the cached prompt")
    if q.times != c.times:
        return Verdict(False, "time", f"the query says {', '.join(sorted(q.times))}, "
                                      f"the cached prompt {', '.join(sorted(c.times))}")
    if q.kinds and c.kinds and not _kind_groups(q.kinds) & _kind_groups(c.kinds):
        return Verdict(False, "question", f"the query asks {'/'.join(sorted(q.kinds))}, "
                                          f"the cached prompt {'/'.join(sorted(c.kinds))}")
    missing = _entity_missing(q, c)
    if missing is not None:
        return Verdict(False, "entity", f"'{missing}' of the query is not in the cached prompt")
    missing = _entity_missing(c, q)
    if missing is not None:
        return Verdict(False, "entity", f"'{missing}' of the cached prompt is not in the query")
    return ACCEPT


def _kind_groups(kinds: set[str]) -> set[str]:
    """"how many hours" and "how long" and "how old" all ask for an amount."""
    return {"amount" if k in ("quantity", "duration", "age") else k for k in kinds}


_ROLE = {"src": "source", "dst": "target", "lhs": "left side of the comparison",
         "rhs": "right side of the comparison"}

Embed = Callable[[list[str]], np.ndarray]


def words_to_embed(query: str, cached: str) -> list[str]:
    """The words model mode needs vectors for: the content words of both texts when the lexical
    checks found only a substitution (empty: nothing to ask the model)."""
    if not _hard(query, cached).ok:
        return []
    q, c = features(query), features(cached)
    if swapped_words(q, c) is None:
        return []
    return sorted(set(q.content.values()) | set(c.content.values()))


def model_check(query: str, cached: str, vectors: dict[str, np.ndarray]) -> Verdict:
    """Model mode: every check but the substitution as in ``lexical``; each swapped word needs a
    counterpart among the other text's content words at word-embedding cosine >= ``WORD_MATCH``
    (``vectors``: the embeddings of ``words_to_embed``)."""
    verdict = _hard(query, cached)
    if not verdict.ok:
        return verdict
    q, c = features(query), features(cached)
    swap = swapped_words(q, c)
    if swap is None:
        return ACCEPT
    for side, words, other in (("query", swap[0], c), ("cached prompt", swap[1], q)):
        pool = [vectors[w] for w in other.content.values() if w in vectors]
        for word in words:
            if word not in vectors:
                raise ValueError(f"model_check needs the embedding of {word!r} (words_to_embed)")
            best = max((float(np.dot(vectors[word], v)) for v in pool), default=0.0)
            if best < WORD_MATCH:
                return Verdict(False, "substitution", f"'{word}' of the {side} has no counterpart in the other "
                                                      f"text (model: best word similarity {best:.2f} < {WORD_MATCH})")
    return ACCEPT


def verify(query: str, cached: str, mode: str = DEFAULT_MODE, embed: Embed | None = None) -> Verdict:
    """Is the cached prompt's answer right for the query? ``mode``: off (always), lexical, model
    (the substitution check asks ``embed(texts) -> unit rows``)."""
    if mode == "off":
        return ACCEPT
    if mode == "lexical":
        return lexical(query, cached)
    if mode != "model":
        raise ValueError(f"verify mode must be one of {', '.join(MODES)}")
    if embed is None:
        raise ValueError("VERIFY model needs an embedding model")
    words = words_to_embed(query, cached)
    rows = embed(words) if words else np.zeros((0, 0), dtype=np.float32)
    return model_check(query, cached, dict(zip(words, rows, strict=True)))
