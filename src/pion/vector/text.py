"""Full-text tokenising as RediSearch does it: separators, escapes, lower-casing, stop-words and
Snowball stemming (the stem is indexed beside the word, marked ``+``, so ``running`` finds
``runs``: RediSearch's query expansion).

The stemmer is ``snowballstemmer`` (the Snowball algorithms RediSearch compiles in), part of the
``search`` extra; without it stemming is off, and the server log says so once.
"""

from __future__ import annotations

from functools import lru_cache

#: RediSearch's default separators (tokenize.h DEFAULT_SEPARATORS) plus whitespace
SEPARATORS = frozenset(",.<>{}[]\"':;!@#$%^&*()-+=~/|\\?` \t\n\r\v\f")
#: RediSearch's default stop-word list (stopwords.c)
DEFAULT_STOPWORDS = frozenset(
    "a is the an and are as at be but by for if in into it no not of on or such that their then "
    "there these they this to was will with".split()
)
STEM_PREFIX = "+"
#: languages RediSearch accepts for LANGUAGE (Snowball's); Chinese needs its own segmenter
LANGUAGES = (
    "arabic", "armenian", "basque", "catalan", "danish", "dutch", "english", "finnish", "french",
    "german", "greek", "hindi", "hungarian", "indonesian", "irish", "italian", "lithuanian",
    "nepali", "norwegian", "portuguese", "romanian", "russian", "serbian", "spanish", "swedish",
    "tamil", "turkish", "yiddish",
)
#: words shorter than this are not stemmed (RediSearch's MINSTEMLEN default; the indexer reads the
#: configured value at each document, the query side keeps this one, as RediSearch 2.10's does)
MIN_STEM_LEN = 4


def stem_min_len(config: dict[str, str] | None) -> int:
    """FT.CONFIG MINSTEMLEN, read at each document: a change applies to documents indexed after it
    (RediSearch 2.10 reads its global in the tokenizer the same way)."""
    try:
        return int((config or {}).get("MINSTEMLEN", MIN_STEM_LEN))
    except ValueError:
        return MIN_STEM_LEN


def fold(word: str) -> str:
    """A TEXT term or a TAG value as the index keeps it: Unicode full case folding, as the Query
    Engine of Redis 8 does it (nunicode's fold, since RediSearch 2.10.12/8.0: ``Straße`` and
    ``STRASSE`` are one term ``strasse``, a final ``ς`` is ``σ``, ``ÉCOLE`` is ``école``).
    RediSearch 2.10.5 (Redis Stack 7.4) lower-cases ASCII letters only; Pion follows 8.x."""
    return word.casefold()


def tokenize(text: str) -> list[str]:
    """Case-folded tokens (``fold``); a backslash keeps the next character inside the token."""
    tokens: list[str] = []
    current: list[str] = []
    escaped = False
    for ch in text:
        if escaped:
            current.append(ch)
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch in SEPARATORS:
            if current:
                tokens.append(fold("".join(current)))
                current = []
        else:
            current.append(ch)
    if current:
        tokens.append(fold("".join(current)))
    return tokens


@lru_cache(maxsize=32)
def _stemmer(language: str):
    try:
        import snowballstemmer
    except ImportError:  # the search extra is not installed: said once, in the server log
        import logging

        logging.getLogger("pion.search").warning(
            "snowballstemmer is missing (pip install 'pion[search]'): TEXT fields are indexed without stemming")
        return None
    try:
        return snowballstemmer.stemmer(language)
    except KeyError:
        return None


def stemming_available(language: str = "english") -> bool:
    return _stemmer(language) is not None


@lru_cache(maxsize=65536)
def stem(word: str, language: str = "english", min_len: int = MIN_STEM_LEN) -> str | None:
    """The word's stem when it differs from the word (and the word has ``min_len`` letters or
    more: the indexer passes FT.CONFIG MINSTEMLEN), else None."""
    if len(word) < min_len:
        return None
    stemmer = _stemmer(language)
    if stemmer is None:
        return None
    root = stemmer.stemWord(word)
    return root if root != word else None


@lru_cache(maxsize=65536)
def stem_always(word: str, language: str = "english") -> str:
    """The stemmer's form of the word whatever its length (the query expander's, which RediSearch
    applies to every word; the indexer stems only words of MINSTEMLEN letters or more)."""
    stemmer = _stemmer(language)
    return word if stemmer is None else stemmer.stemWord(word)


def edit_distance_at_most(a: str, b: str, limit: int) -> bool:
    """Levenshtein(a, b) <= limit, with an early exit (fuzzy ``%term%``)."""
    if abs(len(a) - len(b)) > limit:
        return False
    previous = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        current = [i] + [0] * len(b)
        best = current[0]
        for j, cb in enumerate(b, 1):
            current[j] = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (ca != cb))
            best = min(best, current[j])
        if best > limit:
            return False
        previous = current
    return previous[-1] <= limit


def wildcard_match(pattern: str, word: str) -> bool:
    """``w'...'`` patterns: ``?`` one character, ``*`` any run, ``\\`` escapes.

    Matched with the two-pointer wildcard walk (back to the last star only), so a pattern such as
    ``*a*a*a*a*b`` costs at most len(pattern) * len(word) steps: a regex with ``.*`` per star
    backtracks exponentially on it.
    """
    tokens: list[str | None] = []  # a character, or None for a star
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\" and i + 1 < len(pattern):
            tokens.append("\\" + pattern[i + 1])
            i += 2
            continue
        tokens.append(None if ch == "*" else ch)
        i += 1
    p = w = 0
    star = -1
    resume = 0
    while w < len(word):
        tok = tokens[p] if p < len(tokens) else ""
        if tok is None:
            star, resume = p, w
            p += 1
        elif tok and (tok == "?" or tok[-1] == word[w]):
            p += 1
            w += 1
        elif star >= 0:
            p = star + 1
            resume += 1
            w = resume
        else:
            return False
    while p < len(tokens) and tokens[p] is None:
        p += 1
    return p == len(tokens)
