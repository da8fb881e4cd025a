"""PHONETIC TEXT fields as RediSearch 2.10 does them: Double Metaphone codes as extra terms.

``FT.CREATE ... SCHEMA name TEXT PHONETIC dm:en`` (``dm:fr``, ``dm:pt`` and ``dm:es`` are accepted
and, as in RediSearch, give the same codes: its matcher ignores the language). Each token of such a
field at least FT.CONFIG ``MIN_PHONETIC_TERM_LEN`` long (default 3) also indexes its *primary*
Double Metaphone code, cut to 4 letters and prefixed ``<`` so it cannot collide with a word (the
term ``<JN`` for "John"), at the token's position; a shorter token indexes the last code of its
value again (RediSearch's tokenizer keeps it: "Jon x y z" holds ``<JN`` 4 times, ``fields``
does the same). RediSearch computes a secondary code too but
indexes and expands the primary only (measured on RediSearch 2.10.5: "Schmidt", primary ``XMT``,
does not find "Smith", whose secondary is ``XMT``). A query term on a phonetic field (or on all
fields of an index that has one) is expanded with its code, whatever its length, so ``@name:jon``
finds "John"; ``=>{$phonetic: false}`` turns it off, and the attribute on a field set without a
phonetic field is RediSearch's error. The code's postings score as any expansion (stems do).

The algorithm is PyPI's ``metaphone`` (pure Python, the ``search`` extra), imported lazily; without
it a PHONETIC field is refused at FT.CREATE. RediSearch's C code pads the word with spaces, so
"jose" alone is read as Spanish (``HS``): that one case is mended here; any other code that
differs is listed in docs/compat-differences.md.
"""

from __future__ import annotations

from functools import lru_cache

from pion.protocol.errors import ReplyError

PREFIX = "<"
MATCHERS = ("dm:en", "dm:fr", "dm:pt", "dm:es")
#: RediSearch 2.10's error text for a matcher it does not know
MATCHER_ERROR = ("Matcher Format: <2 chars algorithm>:<2 chars language>. Support algorithms: double metaphone "
                 "(dm). Supported languages: English (en), French (fr), Portuguese (pt) and Spanish (es)")
NOT_PHONETIC = "field does not support phonetics"
DEFAULT_MIN_LEN = 3
#: RediSearch's double metaphone keeps 4 letters of a code
CODE_LEN = 4


def check_matcher(matcher: str) -> str:
    """The matcher when RediSearch accepts it (case-sensitive, as there); the library is needed."""
    if matcher not in MATCHERS:
        raise ReplyError(MATCHER_ERROR)
    if _doublemetaphone() is None:
        raise ReplyError("PHONETIC needs the 'metaphone' package: pip install 'pion[search]'")
    return matcher


@lru_cache(maxsize=1)
def _doublemetaphone():
    try:
        from metaphone import doublemetaphone
    except ImportError:
        return None
    return doublemetaphone


@lru_cache(maxsize=65536)
def code(word: str) -> str | None:
    """The term a (lower-cased) word's primary code is indexed as, ``None`` when it has none."""
    encode = _doublemetaphone()
    if encode is None or not word:
        return None
    read = _as_redisearch_reads(word)
    try:
        primary, secondary = encode(read)
    except Exception:  # the library on an odd character: no code, as for a word without consonants
        return None
    if read[:1] != word[:1] and read[:1] in "aeiouy" and primary[:1] == "A":
        primary = primary[1:]  # the C code's initial vowel is a skipped byte there: no leading A
    if word == "jose":  # RediSearch reads the padded "JOSE " as the Spanish name
        primary = secondary or primary
    primary = primary[:CODE_LEN]
    return PREFIX + primary if primary else None


def _as_redisearch_reads(word: str) -> str:
    """The word as RediSearch's C code meets it, where the library would read it otherwise.

    The C code walks UTF-8 bytes: a non-ASCII letter is two or more bytes it skips (``müller`` is
    ``MLR``, ``ñandú`` is ``NT``: a vowel after it is not initial), so it is dropped here (the
    library repeats the previous code for a character it does not know). It pads the word with spaces, which its rules read as a following space: a
    final ``ch`` after a, o, u, e (or alone) is ``K`` (``much``: ``MK``), and a final ``umb`` or an
    ``umber`` keeps the ``b`` silent (``dumb``: ``TM``, ``number``: ``NMR``). And a ``gh`` as the
    second or third letter after a vowel goes on to Parker's rule there (``high``: ``H``, ``ought``:
    ``AKT``), which the library skips."""
    if not word.isascii():
        word = "".join(ch for ch in word if ch.isascii())
    if word.endswith("ch") and (len(word) == 2 or word[-3] in "aoue"):
        word = word[:-2] + "k"
    at = word.find("gh")
    if at in (1, 2) and word[at - 1] in "aeiouy":  # the C code goes on to Parker's rule there
        if at == 2 and word[0] in "bhd":
            word = word[:at] + "w" + word[at + 2:]  # high, hugh: silent (a w after a vowel is, in a primary code)
        elif word[at - 1] != "i":
            word = word[:at] + "k" + word[at + 2:]  # ought: AKT
    if word.endswith("umb"):
        word = word[:-1]
    elif "umber" in word:
        word = word.replace("umber", "umer")
    return word


def min_len(config: dict[str, str] | None) -> int:
    """FT.CONFIG MIN_PHONETIC_TERM_LEN, read at each document (as RediSearch reads its global)."""
    try:
        return int((config or {}).get("MIN_PHONETIC_TERM_LEN", DEFAULT_MIN_LEN))
    except ValueError:
        return DEFAULT_MIN_LEN


def parse_flag(value: str) -> bool:
    """``$phonetic``'s value: RediSearch takes true/false (any case) and 1/0."""
    lowered = value.lower()
    if lowered in ("true", "1"):
        return True
    if lowered in ("false", "0"):
        return False
    raise ReplyError(f"Invalid value ({value}) for `phonetic`")
