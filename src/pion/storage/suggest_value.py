"""The suggestion dictionary of FT.SUGADD / FT.SUGGET (TYPE ``trietype0``, RediSearch's type name).

RediSearch keeps suggestions in a compressed prefix tree (a radix trie of 16-bit runes) and answers
FT.SUGGET by walking it under a Levenshtein automaton, keeping the best ``MAX`` entries in a binary
heap. Which entries come back, with which score and in which order (ties included) follows from
that walk: the children's order (a new entry goes before the first sibling whose subtree's best is
lower; a node re-sorts when a child's best moves out of order, ties in rune order), the iterator
skipping subtrees whose best score cannot enter a full heap (or is below INT_MIN), the heap's own
tie handling (an equal score never displaces an entry) and the float32 arithmetic of the scores.
So this module is the same machine, written in Python after RediSearch 2.10's trie: a radix trie
with the same split / merge / delete rules, the same iterator, the same automaton (prefix mode,
distance 0 or 1) and the same heap, so that replies match RediSearch's byte for byte
(``tests/search/stack_diff.py`` checks it against Redis Stack).

Scores: an entry's score is a float32; FT.SUGGET reports ``INT_MAX`` for an exact match (RediSearch
compares the first half of the two rune strings, the query case-folded), multiplies by ``exp(-2 * distance)`` under FUZZY, and
divides by ``sqrt(1 + |runes of the entry - bytes of the query|)``.

Snapshots and DUMP store the entries in walk order (text, float64 score, payload); loading inserts
them in that order, as RediSearch's RDB load does.
"""

from __future__ import annotations

import math
import struct
from typing import Any

from pion.storage import serialize
from pion.storage.encodings import register_encoding
from pion.storage.keyspace import register_type
from pion.storage.memory import register_sizer

TYPE_ID = 17
#: RediSearch's TRIE_INITIAL_STRING_LEN: an entry has fewer runes (and at most twice as many bytes)
MAX_STRING_LEN = 255
#: RediSearch's TRIE_MAX_PREFIX: a longer FT.SUGGET prefix is an ``Invalid query``
MAX_PREFIX = 100
_INT_MAX_F32 = 2147483648.0  # (float)INT_MAX
_INT_MIN_F32 = -2147483648.0  # the walk's first bar: a subtree whose best is below it is skipped
_F32_MAX = 3.4028234663852886e38


def f32(value: float) -> float:
    """``value`` rounded to a C float (out of range: an infinity, as the C cast gives)."""
    if math.isinf(value) or math.isnan(value):
        return value
    try:
        return struct.unpack("<f", struct.pack("<f", value))[0]
    except OverflowError:
        return math.copysign(math.inf, value)


def fold(ch: str) -> str:
    """One rune's simple case fold (RediSearch folds rune by rune: ``ß`` stays ``ß``)."""
    folded = ch.casefold()
    if len(folded) == 1:
        return folded
    lowered = ch.lower()
    return lowered if len(lowered) == 1 else ch


class _Node:
    __slots__ = ("text", "score", "terminal", "deleted", "max_child", "payload", "children")

    def __init__(self, text: str, score: float, terminal: bool, payload: bytes | None = None,
                 children: list[_Node] | None = None) -> None:
        self.text = text
        self.score = score
        self.terminal = terminal
        self.deleted = False
        self.max_child = score  # the best score in this subtree (RediSearch's maxChildScore)
        self.payload = payload or None
        self.children: list[_Node] = children if children is not None else []


def _split(n: _Node, offset: int) -> None:
    """Cut ``n`` at ``offset``: its tail, data and children move to a single new child."""
    child = _Node(n.text[offset:], n.score, n.terminal, n.payload, n.children)
    child.deleted = n.deleted
    child.max_child = n.max_child
    n.text = n.text[:offset]
    n.children = [child]
    n.score = 0.0
    n.terminal = n.deleted = False
    n.max_child = max(n.max_child, child.score)
    n.payload = None


def _sort_children(n: _Node) -> None:
    """Best subtree first; equal bests in rune order (RediSearch's score-mode comparator)."""
    if len(n.children) > 1:
        n.children.sort(key=lambda c: (-c.max_child, c.text))


def _add(n: _Node, text: str, score: float, payload: bytes | None, incr: bool) -> int:
    """Insert below ``n`` (``text`` relative to it); 1 when a new entry was made."""
    if score == 0 or not text:
        return 0
    offset = 0
    limit = min(len(text), len(n.text))
    while offset < limit and text[offset] == n.text[offset]:
        offset += 1
    if offset < len(n.text):
        _split(n, offset)
        if offset == len(text):
            n.score = score
            n.terminal = True
            n.payload = payload or None
        else:  # the new leaf goes before or after the split's one child, by its first rune
            idx = 1 if text[offset] > n.children[0].text[0] else 0
            n.children.insert(idx, _Node(text[offset:], score, True, payload))
            n.max_child = max(n.max_child, score)
        return 1
    n.max_child = max(n.max_child, score)
    if offset == len(text):
        existed = n.terminal and not n.deleted
        n.score = f32(n.score + score) if incr else score
        if payload:
            n.payload = payload
        n.terminal = True
        n.deleted = False
        return 0 if existed else 1
    first = text[offset]
    children = n.children
    score_idx = -1
    for idx, child in enumerate(children):
        if child.text[0] == first:
            rc = _add(child, text[offset:], score, payload, incr)
            # re-sort only when the child moved out of order (RediSearch's check, its bound included)
            if len(children) > 1 and ((idx > 0 and child.max_child > children[idx - 1].max_child) or
                                      (idx < len(children) - 2 and child.max_child < children[idx + 1].max_child)):
                _sort_children(n)
            return rc
        if score_idx < 0 and child.max_child < score:
            score_idx = idx
    children.insert(score_idx if score_idx >= 0 else len(children), _Node(text[offset:], score, True, payload))
    return 1


def _merge_single_child(n: _Node) -> _Node:
    if n.terminal or len(n.children) != 1:
        return n
    ch = n.children[0]
    merged = _Node(n.text + ch.text, ch.score, ch.terminal, ch.payload, ch.children)
    merged.deleted = ch.deleted
    merged.max_child = ch.max_child
    return merged


def _optimize_children(n: _Node) -> None:
    nodes = n.children
    n.max_child = n.score
    i = 0
    while i < len(nodes):
        if not nodes[i].children and nodes[i].deleted:
            del nodes[i]
            for later in nodes[i:]:
                n.max_child = max(n.max_child, later.max_child)
            break  # RediSearch's loop ends after closing the gap
        if len(nodes[i].children) == 1:
            nodes[i] = _merge_single_child(nodes[i])
        n.max_child = max(n.max_child, nodes[i].max_child)
        i += 1
    _sort_children(n)


def _delete(root: _Node, text: str) -> int:
    stack: list[_Node] = []
    n: _Node | None = root
    offset = 0
    rc = 0
    while n is not None and offset < len(text):
        stack.append(n)
        local = 0
        while offset < len(text) and local < len(n.text) and text[offset] == n.text[local]:
            offset += 1
            local += 1
        if offset == len(text):
            if local == len(n.text) and not n.deleted and n.terminal:
                n.deleted = True
                n.terminal = False
                n.score = 0.0
                rc = 1
            break
        if local == len(n.text):
            n = next((c for c in n.children if c.text[0] == text[offset]), None)
        else:
            break
    for node in reversed(stack):
        _optimize_children(node)
    return rc


# -- the Levenshtein automaton (a sparse vector of (index, cost) per state) ----------------------


class _Automaton:
    __slots__ = ("query", "max")

    def __init__(self, query: str, max_dist: int) -> None:
        self.query = query
        self.max = max_dist

    def start(self) -> tuple:
        return tuple((i, i) for i in range(self.max + 1))

    def step(self, state: tuple, c: str) -> tuple:
        q, top = self.query, self.max
        out: list[tuple[int, int]] = []
        if state and state[0][0] == 0 and state[0][1] < top:
            out.append((0, state[0][1] + 1))
        for j, (idx, val) in enumerate(state):
            if idx == len(q):
                break
            if q[idx] != c:
                val += 1
            if out and out[-1][0] == idx:
                val = min(val, out[-1][1] + 1)
            if j + 1 < len(state) and state[j + 1][0] == idx + 1:
                val = min(val, state[j + 1][1] + 1)
            if val <= top:
                out.append((idx + 1, val))
        return tuple(out)

    def is_match(self, state: tuple) -> bool:
        return bool(state) and state[-1][0] == len(self.query)


class _Filter:
    """The prefix-mode DFA filter: a state per rune walked (``None`` once the prefix matched)."""

    __slots__ = ("auto", "states", "dists", "dist", "cache")

    def __init__(self, query: str, max_dist: int) -> None:
        self.auto = _Automaton(query, max_dist)
        self.states: list[tuple | None] = [self.auto.start()]
        self.dists = [max_dist + 1]
        self.dist = max_dist + 1  # shared by every match, as in RediSearch's search loop
        self.cache: dict[tuple, tuple] = {}

    def feed(self, rune: str) -> tuple[bool, bool]:
        """(go on, matched) for the next rune."""
        dn = self.states[-1]
        min_dist = self.dists[-1]
        if dn is None:
            self.states.append(None)
            self.dists.append(min_dist)
            return True, True
        auto = self.auto
        matched = auto.is_match(dn)
        if matched:
            self.dist = min(dn[-1][1], min_dist)
        key = (dn, rune)
        nxt = self.cache.get(key)
        if nxt is None:
            nxt = self.cache[key] = auto.step(dn, fold(rune))
        if nxt:
            if auto.is_match(nxt):
                matched = True
                self.dist = min(nxt[-1][1], min_dist)
            self.states.append(nxt)
            self.dists.append(min(nxt[-1][1], min_dist))
            return True, matched
        if matched:
            self.states.append(None)
            self.dists.append(min_dist)
            return True, True
        return False, matched

    def pop(self, levels: int) -> None:
        if levels:
            del self.states[-levels:]
            del self.dists[-levels:]


class _Frame:
    __slots__ = ("node", "state", "offset", "child")

    def __init__(self, node: _Node) -> None:
        self.node = node
        self.state = 0  # 0 self, 1 children, 2 match
        self.offset = 0
        self.child = 0


def _walk(root: _Node, filt: _Filter | None, holder: list[float]):
    """RediSearch's trie iterator: yields (text, score, payload) of each matching entry, in walk
    order; ``holder[0]`` is the heap's minimum, below which subtrees are skipped."""
    stack = [_Frame(root)]
    buf: list[str] = []

    def pop() -> None:
        frame = stack.pop()
        if filt is not None:
            filt.pop(frame.offset)
        if frame.offset:
            del buf[-frame.offset:]

    while stack:
        cur = stack[-1]
        node = cur.node
        if cur.state == 2:
            pop()
            continue
        if cur.state == 0:
            if cur.offset < len(node.text):
                rune = node.text[cur.offset]
                matched = False
                if filt is not None:
                    go_on, matched = filt.feed(rune)
                    if not go_on:
                        if matched:
                            cur.state = 2
                        else:
                            pop()
                        continue
                buf.append(rune)
                cur.offset += 1
                if filt is None:
                    matched = cur.offset == len(node.text) and node.terminal and not node.deleted
                if matched and node.terminal and not node.deleted and cur.offset == len(node.text):
                    yield "".join(buf), node.score, node.payload
                continue
            cur.state = 1
        if cur.child < len(node.children):
            ch = node.children[cur.child]
            cur.child += 1
            low = holder[0]
            if ch.max_child >= low or ch.score >= low:
                if len(stack) < MAX_STRING_LEN - 1:
                    stack.append(_Frame(ch))
        else:
            pop()


# -- the heap (a binary heap keeping the lowest score at the root) --------------------------------


def _cmp(a: list, b: list) -> int:
    return 1 if a[0] < b[0] else (-1 if a[0] > b[0] else 0)


def _heap_offer(h: list, item: list) -> None:
    h.append(item)
    idx = len(h) - 1
    while idx:
        parent = (idx - 1) // 2
        if _cmp(h[idx], h[parent]) < 0:
            return
        h[idx], h[parent] = h[parent], h[idx]
        idx = parent


def _heap_poll(h: list) -> list:
    item = h[0]
    last = h.pop()
    if h:
        h[0] = last
        if len(h) > 1:
            idx = 0
            while True:
                left, right = 2 * idx + 1, 2 * idx + 2
                if right >= len(h):
                    if left >= len(h):
                        break
                    child = left
                elif _cmp(h[left], h[right]) < 0:
                    child = right
                else:
                    child = left
                if _cmp(h[idx], h[child]) < 0:
                    h[idx], h[child] = h[child], h[idx]
                    idx = child
                else:
                    break
    return item


class SuggestValue:
    """A suggestion dictionary: the trie's root and its entry count (FT.SUGLEN)."""

    __slots__ = ("root", "size", "bytes")

    def __init__(self) -> None:
        self.root = _Node("", 0.0, False)
        self.size = 0
        self.bytes = 0

    def add(self, text: str, score: float, payload: bytes | None = None, incr: bool = False) -> int:
        """Insert (or update) an entry; 1 if it is new. Too long or a zero score: 0, nothing kept."""
        if len(text.encode("utf-8")) > MAX_STRING_LEN * 2 or not text or len(text) >= MAX_STRING_LEN:
            return 0
        rc = _add(self.root, text, f32(score), payload, incr)
        self.size += rc
        if rc:
            self.bytes += len(text) * 4 + len(payload or b"") + 64
        return rc

    def delete(self, text: str) -> int:
        if not text or len(text) > MAX_STRING_LEN:
            return 0
        rc = _delete(self.root, text)
        self.size -= rc
        if rc:
            self.bytes = max(0, self.bytes - len(text) * 4 - 64)
        return rc

    def entries(self) -> list[tuple[str, float, bytes | None]]:
        """Every entry in walk order (what a snapshot stores)."""
        return list(_walk(self.root, None, [-math.inf]))

    def search(self, prefix: str, num: int, fuzzy: bool, trim: bool = False) -> list:
        """FT.SUGGET: up to ``num`` ``[score, text, payload]`` best first. A prefix too long raises
        ValueError with RediSearch's text."""
        plen = len(prefix.encode("utf-8"))
        if plen > MAX_PREFIX * 2:
            raise ValueError("Invalid query length")
        runes = "".join(fold(c) for c in prefix)
        if len(runes) >= MAX_PREFIX:
            raise ValueError("Invalid query")
        max_dist = 1 if fuzzy else 0
        filt = _Filter(runes, max_dist)
        holder = [_INT_MIN_F32]
        heap: list[list] = []
        head = runes.encode("utf-16-le", "surrogatepass")
        for text, score, payload in _walk(self.root, filt, holder):
            # RediSearch's exact-match test compares the first len(runes) *bytes* of the two 16-bit
            # rune strings (half of them), the stored one as written, the query case-folded
            exact = text and len(text) == len(runes) and \
                text.encode("utf-16-le", "surrogatepass")[:len(text)] == head[:len(text)]
            value = _INT_MAX_F32 if exact else score
            if max_dist > 0:
                value = f32(value * math.exp(-(2 * filt.dist)))
            value = f32(value / math.sqrt(1 + abs(len(text) - plen)))
            if len(heap) < num:
                _heap_offer(heap, [value, text, payload])
                if len(heap) == num:
                    holder[0] = heap[0][0]
            elif value > holder[0]:
                _heap_poll(heap)
                _heap_offer(heap, [value, text, payload])
                if heap[0][0] > holder[0]:
                    holder[0] = heap[0][0]
        n = min(len(heap), num)
        out: list[Any] = [None] * n
        for i in range(n):
            out[n - i - 1] = _heap_poll(heap)
        if trim:
            best = 0.0
            for i, item in enumerate(out):
                if best and item[0] < best / 10.0:
                    out = out[:i]
                    break
                best = max(best, item[0])
        return out


def format_score(value: float) -> bytes:
    """A score as Redis 7.4 writes a double (the shortest text that reads back, ``inf``)."""
    if math.isinf(value):
        return b"inf" if value > 0 else b"-inf"
    text = repr(value)
    if text.endswith(".0"):
        text = text[:-2]
    return text.encode()


def _dump(value: SuggestValue) -> bytes:
    parts = [struct.pack("<I", value.size)]
    for text, score, payload in value.entries():
        raw = text.encode("utf-8", "surrogatepass")
        pay = payload or b""
        parts.append(struct.pack("<IdI", len(raw), score, len(pay)) + raw + pay)
    return b"".join(parts)


def _load(body: bytes) -> SuggestValue:
    value = SuggestValue()
    try:
        (count,) = struct.unpack_from("<I", body, 0)
        pos = 4
        for _ in range(count):
            tlen, score, plen = struct.unpack_from("<IdI", body, pos)
            pos += 16
            text = body[pos:pos + tlen].decode("utf-8", "surrogatepass")
            pos += tlen
            payload = body[pos:pos + plen] or None
            pos += plen
            value.add(text, score, payload)
    except (struct.error, UnicodeDecodeError) as exc:
        raise serialize.PayloadError(f"corrupt suggestion dictionary: {exc}") from None
    if pos != len(body):
        raise serialize.PayloadError("corrupt suggestion dictionary: trailing bytes")
    return value


register_type(SuggestValue, "trietype0")
serialize.register_codec(SuggestValue, TYPE_ID, _dump, _load)
register_sizer(SuggestValue, lambda value: 96 + value.bytes)
register_encoding(SuggestValue, lambda value, settings: "raw")
