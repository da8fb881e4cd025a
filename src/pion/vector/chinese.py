"""Chinese word segmentation for ``LANGUAGE chinese`` indexes, documents and queries.

Why: Chinese is written without spaces, so RediSearch's separator tokenizer would index a whole
sentence as one word; RediSearch segments Chinese with friso, Pion with jieba (PyPI ``jieba``: a
kept, pure-Python segmenter with its own dictionary, part of the ``search`` extra, loaded on the
first Chinese document or query). A document in Chinese is cut into words (jieba's precise mode),
each word a token with its own position, so phrases and slop work on words; text that is not
Chinese inside it (Latin words, numbers) is tokenised as RediSearch's default tokenizer does. A
query word with Chinese characters is cut the same way, and its words must all match (an
intersection), as RediSearch does with friso. Chinese has no stemming (Snowball has no Chinese).

The two segmenters' dictionaries differ, so a few words are cut differently (friso keeps
``毕业于`` whole, jieba cuts ``毕业`` / ``于``): docs/compat-differences.md.
"""

from __future__ import annotations

import logging
import re
import threading
from functools import lru_cache

from pion.vector import text

LANGUAGE = "chinese"
_CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002ebef]")
_lock = threading.Lock()
_loaded = None


class SegmenterMissing(RuntimeError):
    """jieba is not installed: LANGUAGE chinese cannot segment."""


def has_cjk(value: str) -> bool:
    return _CJK.search(value) is not None


def _segmenter():
    global _loaded
    if _loaded is None:
        with _lock:
            if _loaded is None:
                try:
                    import jieba
                except ImportError as exc:
                    raise SegmenterMissing("LANGUAGE chinese needs jieba: pip install 'pion[search]'") from exc
                jieba.setLogLevel(logging.WARNING)
                jieba.initialize()
                _loaded = jieba
    return _loaded


def available() -> bool:
    try:
        import jieba  # noqa: F401
    except ImportError:
        return False
    return True


def warm_up() -> None:
    """Load the dictionary in a background thread (a second or two), so the first Chinese document
    or query does not wait on the event loop for all of it."""
    if _loaded is None and available():
        threading.Thread(target=_segmenter, name="pion-jieba", daemon=True).start()


_warned = False


def _fallback(value: str) -> list[str]:
    """Without jieba (a document whose LANGUAGE_FIELD says chinese): the default tokenizer, said once."""
    global _warned
    if not _warned:
        _warned = True
        logging.getLogger("pion.search").warning(
            "jieba is missing (pip install 'pion[search]'): Chinese text is tokenised without segmentation")
    return text.tokenize(value)


def tokenize(value: str) -> list[str]:
    """The tokens of a document's text: Chinese cut into words, the rest as ``text.tokenize``."""
    if not has_cjk(value):
        return text.tokenize(value)
    try:
        segmenter = _segmenter()
    except SegmenterMissing:
        return _fallback(value)
    tokens: list[str] = []
    for piece in segmenter.cut(value, HMM=True):
        if has_cjk(piece):
            tokens.append(piece)
        elif not piece.isspace():
            tokens.extend(text.tokenize(piece))
    return tokens


@lru_cache(maxsize=4096)
def query_words(word: str) -> tuple[str, ...]:
    """A query word's Chinese words (the word itself when it has no Chinese characters)."""
    if not has_cjk(word):
        return (word,)
    return tuple(tokenize(word)) or (word,)
