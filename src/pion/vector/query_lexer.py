"""Tokens of RediSearch's query language (the v2 lexer's classes: ``lexer.rl``).

A term is a run of characters that are not ASCII punctuation, control or space (``_`` and any
backslash-escaped character included); ``@name`` is a field modifier, ``$name`` a parameter;
``"..."`` and ``'...'`` are exact phrases; ``term*``, ``*term``, ``*term*`` are prefix, suffix and
infix; ``w'...'`` is a wildcard pattern; ``@f==3`` style comparisons come as one token.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pion.protocol.errors import ReplyError

_PUNCT = frozenset("!\"#$%&'()*+,-./:;<=>?@[\\]^`{|}~")
_NUMBER = re.compile(r"[+-]?(inf|(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?)(?![\w.])", re.I)
_COMPARE = re.compile(r"\s*(==|!=|>=|<=|>|<)\s*")
#: the common tokens, lexed in runs by one C-level scan: a plain term (``is_term_char``'s class,
#: ``\s`` being ``str.isspace``) not followed by what would make it something else (``*`` a
#: prefix, ``\`` an escape, ``(`` ISMISSING's call, ``'`` a ``w'...'`` pattern), one of the
#: single-character tokens, ``=>``, or a field modifier (``@name``, no escape in it); whatever
#: else the scan meets is the one-token lexer's
_TERM_RUN = r"[^\s\x00-\x1f!\"#$%&'()*+,\-./:;<=>?@\[\\\]^`{|}~]++"
_FAST = re.compile(rf"\s*+(?:(?P<t>{_TERM_RUN})(?![*\\('])|(?P<p>[()|{{}}\[\]:;~%])|(?P<a>=>)|@(?P<m>{_TERM_RUN})(?!\\))")
_SIMPLE = {"(": "LP", ")": "RP", "{": "LB", "}": "RB", "[": "LSQB", "]": "RSQB", ":": "COLON",
           ";": "SEMICOLON", "|": "OR", "~": "TILDE", "%": "PERCENT"}
_NUMBER_START = frozenset("0123456789iI")


@dataclass(slots=True)
class Token:
    kind: str
    text: str
    pos: int
    value: object = None


def syntax_error(pos: int, near: str) -> ReplyError:
    return ReplyError(f"Syntax error at offset {pos} near {near}")


def is_term_char(ch: str) -> bool:
    return not (ch in _PUNCT or ch.isspace() or ord(ch) < 32)


class Lexer:
    """Tokens on demand (``next``); ``pos`` is where lexing goes on from. Runs of common
    tokens come from one regex scan (``_FAST``) into a buffer, so a 20,000-term query lexes in a
    few milliseconds; the rest, one at a time, from the character-level rules below. ``seek``
    moves on past a section the parser reads raw (tag lists, ranges, attributes)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0
        self._ahead: list[Token] = []  # lexed by the scan, not handed out yet (reversed)

    def seek(self, pos: int) -> None:
        self.pos = pos
        self._ahead.clear()

    def _scan(self) -> None:
        """Fill the buffer with the run of common tokens from ``pos`` (none if it starts otherwise);
        ``pos`` moves to the run's end (the buffer is handed out before the next character-level
        token is lexed, and ``seek`` drops it)."""
        text = self.text
        pos = self.pos
        run: list[Token] = []
        append = run.append
        for m in _FAST.finditer(text, pos):
            if m.start() != pos:
                break
            kind = m.lastgroup
            if kind == "t":
                start, end = m.span(kind)
                word = m.group(kind)
                if word[0] in _NUMBER_START:  # the number rule first, as in _one()
                    number = _NUMBER.match(text, start)
                    if number is not None and number.end() >= end:
                        if number.end() > end:  # 3.5, 1e+5: _one's
                            break
                        append(Token("NUMBER", word, start, float(word)))
                        pos = end
                        continue
                append(Token("TERM", word, start))
            elif kind == "p":
                start, end = m.span(kind)
                ch = text[start]
                append(Token(_SIMPLE[ch], ch, start))
                if ch == "{" or ch == "[":  # the parser may read what follows raw (a tag list, a range)
                    pos = end
                    break
            elif kind == "m":  # @name, or @name==3 style: as _one() makes them
                start, end = m.span(kind)
                compare = _COMPARE.match(text, end)
                if compare is not None:
                    append(Token("COMPARE", m.group(kind), start - 1, compare.group(1)))
                    end = compare.end()
                else:
                    append(Token("MODIFIER", m.group(kind), start - 1))
            else:
                end = m.end()
                append(Token("ARROW", "=>", end - 2))
            pos = end
        run.reverse()
        self._ahead = run
        self.pos = pos

    def tokens(self) -> list[Token]:
        out: list[Token] = []
        while True:
            tok = self.next()
            out.append(tok)
            if tok.kind == "EOF":
                return out

    def read_term(self, start: int) -> tuple[str, int]:
        """A term starting at ``start`` (escapes resolved); returns (term, end)."""
        text = self.text
        i = start
        chars: list[str] = []
        while i < len(text):
            ch = text[i]
            if ch == "\\":
                if i + 1 == len(text):  # a backslash that ends the query escapes nothing: dropped
                    i += 1
                    break
                chars.append(text[i + 1])
                i += 2
            elif is_term_char(ch):
                chars.append(ch)
                i += 1
            else:
                break
        return "".join(chars), i

    def next(self) -> Token:
        ahead = self._ahead
        if not ahead:
            self._scan()
            ahead = self._ahead
        if ahead:
            return ahead.pop()
        return self._one()

    def _one(self) -> Token:
        """One token by the character-level rules (what the scan does not take)."""
        text = self.text
        n = len(text)
        while self.pos < n and text[self.pos].isspace():
            self.pos += 1
        if self.pos == n - 1 and text[self.pos] == "\\":  # as RediSearch: a trailing lone backslash is nothing
            self.pos = n
        if self.pos >= n:
            return Token("EOF", "", self.pos)
        start = self.pos
        ch = text[start]
        two = text[start:start + 2]
        if two == "=>":
            self.pos += 2
            return Token("ARROW", two, start)
        if ch in _SIMPLE:
            self.pos += 1
            return Token(_SIMPLE[ch], ch, start)
        if ch == "w" and start + 1 < n and text[start + 1] == "'":
            end = self._find_quote(start + 2, "'")
            self.pos = end + 1
            return Token("WILDCARD", text[start + 2:end], start)
        if ch in "\"'":
            end = self._find_quote(start + 1, ch)
            self.pos = end + 1
            raw = text[start + 1:end]
            if self.pos < n and text[self.pos] == "*":
                self.pos += 1
                return Token("PREFIX", _unescape(raw), start)
            return Token("EXACT", raw, start)
        if ch == "*":
            rest = start + 1
            if rest < n and text[rest] in "\"'":
                end = self._find_quote(rest + 1, text[rest])
                word = _unescape(text[rest + 1:end])
                self.pos = end + 1
                if self.pos < n and text[self.pos] == "*":
                    self.pos += 1
                    return Token("CONTAINS", word, start)
                return Token("SUFFIX", word, start)
            if rest < n and (is_term_char(text[rest]) or text[rest] in "\\$"):
                dollar = text[rest] == "$"
                word, end = self.read_term(rest + 1 if dollar else rest)
                self.pos = end
                kind = "SUFFIX"
                if end < n and text[end] == "*":
                    self.pos = end + 1
                    kind = "CONTAINS"
                return Token(kind, word, start, "$" if dollar else None)
            self.pos += 1
            return Token("STAR", "*", start)
        if ch == "-" or ch == "+":
            number = _NUMBER.match(text, start)
            if ch == "-" and (number is None or not _prev_allows_number(text, start)):
                self.pos += 1
                return Token("MINUS", "-", start)
            if number is not None:
                self.pos = number.end()
                return Token("NUMBER", number.group(0), start, float(number.group(0)))
            self.pos += 1
            return Token("MINUS" if ch == "-" else "PLUS", ch, start)
        if ch == "@":
            name, end = self.read_term(start + 1)
            if not name:
                raise syntax_error(start, f"'{ch}'")
            compare = _COMPARE.match(text, end)
            if compare is not None and compare.group(1):
                self.pos = compare.end()
                return Token("COMPARE", name, start, compare.group(1))
            self.pos = end
            return Token("MODIFIER", name, start)
        if ch == "$":
            name, end = self.read_term(start + 1)
            if not name:
                raise syntax_error(start, "'$'")
            self.pos = end
            if end < n and text[end] == "*":
                self.pos = end + 1
                return Token("PREFIX", name, start, "$")
            return Token("ATTRIBUTE", name, start)
        number = _NUMBER.match(text, start)
        if number is not None and (number.end() >= n or not is_term_char(text[number.end()])):
            self.pos = number.end()
            if self.pos < n and text[self.pos] == "*":
                self.pos += 1
                return Token("PREFIX", number.group(0), start)
            return Token("NUMBER", number.group(0), start, float(number.group(0)))
        if is_term_char(ch) or ch == "\\":
            word, end = self.read_term(start)
            self.pos = end
            if end < n and text[end] == "*":
                self.pos = end + 1
                return Token("PREFIX", word, start)
            if word.lower() == "ismissing" and end < n and text[end] == "(":
                return Token("ISMISSING", word, start)
            return Token("TERM", word, start)
        raise syntax_error(start, repr_near(text, start))

    def _find_quote(self, i: int, quote: str) -> int:
        text = self.text
        while i < len(text):
            if text[i] == "\\":
                i += 2
                continue
            if text[i] == quote:
                return i
            i += 1
        raise syntax_error(len(text), "<end of query>: unterminated quote")


def _prev_allows_number(text: str, pos: int) -> bool:
    """``-3`` is a number only where a number may stand (after ``[``, ``(``, a space in a range)."""
    j = pos - 1
    while j >= 0 and text[j] == " ":
        j -= 1
    return j >= 0 and text[j] in "[("


def _unescape(raw: str) -> str:
    if "\\" not in raw:
        return raw
    return re.sub(r"\\(.)", r"\1", raw)


def repr_near(text: str, pos: int) -> str:
    return text[pos:pos + 10] or "<end>"
