"""RediSearch's query language, DIALECT 1 to 4, parsed into a small tree of ``Node``s.

Precedence follows RediSearch's grammars (``query_parser/v1|v2/parser.y``):

- DIALECT 2+: ``|`` binds loosest, then juxtaposition (AND); ``-``, ``~`` and ``@f:`` bind only the
  next atom (``-hello world`` is ``(-hello) world``, ``@name:James Brown`` is ``(@name:James) Brown``).
- DIALECT 1: ``|`` binds tighter than AND (``a b | c d`` is ``a (b|c) d``), and ``-``, ``~`` and
  ``@f:`` take the rest of the intersection (``-hello world`` is ``-(hello world)``).

Vector clauses: ``<filter>=>[KNN k @v $B [EF_RUNTIME n] [HYBRID_POLICY p] [BATCH_SIZE n] [AS d]]``
with optional ``=>{$yield_distance_as: d; ...}``, and ``@v:[VECTOR_RANGE r $B]=>{$EPSILON: e;
$YIELD_DISTANCE_AS: d}``. Parameters (``$name``) come from PARAMS. Errors read like RediSearch's:
``Syntax error at offset N near X``, ``No such parameter `x```.

Nesting (parentheses, ``-``/``~`` prefixes, ``@f:`` modifiers inside each other) is bounded by
``MAX_NESTING``, past which the query is refused with RediSearch's own text for its parser's full
stack, so no query recurses past Python's stack in the parser, the executor or FT.EXPLAIN.
"""

from __future__ import annotations

import math
import re

from pion.protocol.errors import ReplyError
from pion.storage.gc_pause import gc_paused
from pion.vector.fields import UNITS
from pion.vector.geoshape import PREDICATES as GEOSHAPE_PREDICATES
from pion.vector.query_ast import Node, Query
from pion.vector.query_knn import KnnClause, parse_attributes, parse_knn, split_knn
from pion.vector.query_lexer import Lexer, Token, syntax_error
from pion.vector.text import fold

#: how deeply a query may nest (RediSearch's DIALECT 2 parser holds about 250 parentheses, DIALECT 1 97)
MAX_NESTING = 128
TOO_DEEP = "Parser stack overflow. Try moving nested parentheses more to the left"

__all__ = ["MAX_NESTING", "TOO_DEEP", "KnnClause", "Node", "Query", "parse_attributes", "parse_query"]


@gc_paused
def parse_query(text: str, dialect: int = 2, params: dict[str, bytes] | None = None) -> Query:
    params = params or {}
    head, knn_text, knn_pos = split_knn(text)
    parser = _Parser(head, dialect, params)
    root = parser.parse()
    knn = parse_knn(knn_text, knn_pos, text, params) if knn_text is not None else None
    if knn is not None and dialect < 2:
        raise ReplyError("Syntax error: vector similarity (KNN) queries need DIALECT 2 or greater")
    return Query(root=root, knn=knn, text=text)


class _Parser:
    def __init__(self, text: str, dialect: int, params: dict[str, bytes]) -> None:
        self.text = text
        self.dialect = dialect
        self.params = params
        self.lexer = Lexer(text)
        self.tok = self.lexer.next()
        self.depth = 0
        #: inside ``@field:( ... )`` of DIALECT 2+: a text expression, where RediSearch's grammar
        #: (``text_expr``) has no field modifiers
        self.text_only = 0

    def nest(self) -> None:
        self.depth += 1
        if self.depth > MAX_NESTING:
            raise ReplyError(TOO_DEEP)

    # token plumbing
    def advance(self) -> Token:
        tok = self.tok
        self.tok = self.lexer.next()
        return tok

    def at(self, *kinds: str) -> bool:
        return self.tok.kind in kinds

    def error(self, tok: Token | None = None) -> ReplyError:
        tok = tok or self.tok
        near = tok.text if tok.kind != "EOF" else "<end of query>"
        return syntax_error(tok.pos, near)

    def param(self, name: str, pos: int) -> str:
        if name not in self.params:
            raise ReplyError(f"No such parameter `{name}`")
        return self.params[name].decode("utf-8", "replace")

    # grammar
    def parse(self) -> Node:
        if self.at("EOF"):
            return Node("none")
        if self.at("STAR"):
            start = self.tok
            self.advance()
            if self.at("EOF"):
                return Node("all")
            raise self.error(start)
        node = self.union() if self.dialect >= 2 else self.d1_intersect()
        if not self.at("EOF"):
            raise self.error()
        return node

    # -- dialect 2+ ------------------------------------------------------------------------------

    def union(self) -> Node:
        first = self.intersect()
        if not self.at("OR"):
            return first
        children = [first]
        while self.at("OR"):
            self.advance()
            children.append(self.intersect())
        return Node("or", children=children)

    def intersect(self) -> Node:
        children = []
        while not self.at("EOF", "OR", "RP"):
            children.append(self.unary())
        if not children:
            raise self.error()
        return children[0] if len(children) == 1 else Node("and", children=children)

    def unary(self) -> Node:
        if self.at("MINUS", "TILDE"):
            kind = "not" if self.advance().kind == "MINUS" else "opt"
            self.nest()
            inner = self.unary()
            self.depth -= 1
            return self.attributes(Node(kind, children=[inner]))
        return self.attributes(self.atom(self.unary if self.dialect >= 2 else self.d1_intersect_inner))

    # -- dialect 1 -------------------------------------------------------------------------------

    def d1_intersect(self) -> Node:
        children = []
        while not self.at("EOF", "RP"):
            if self.at("MINUS", "TILDE"):
                kind = "not" if self.advance().kind == "MINUS" else "opt"
                self.nest()
                children.append(Node(kind, children=[self.d1_intersect_inner()]))
                self.depth -= 1
                break
            node, terms = self.d1_union()
            if terms:  # a run of words with no `|` after it: its words are the intersection's own
                children.extend(node.children if node.kind == "and" else [node])
            else:
                children.append(node)
        if not children:
            raise self.error()
        return children[0] if len(children) == 1 else Node("and", children=children)

    d1_intersect_inner = d1_intersect

    def d1_union(self) -> tuple[Node, bool]:
        """``a | b | ...`` of DIALECT 1 (RediSearch 2.10 checked with FT.EXPLAIN): `|` binds tighter
        than juxtaposition, except that a run of plain words is one operand (``p q|r s`` is
        ``(p q) | (r s)``, ``p|q (r)`` is ``(p|q) (r)``). Returns the node and whether it is such a
        run alone (no `|`)."""
        first, terms = self.d1_operand()
        if not self.at("OR"):
            return first, terms
        children = [first]
        while self.at("OR"):
            self.advance()
            children.append(self.d1_operand()[0])
        return Node("or", children=children), False

    def d1_operand(self) -> tuple[Node, bool]:
        if not self.at("TERM", "NUMBER"):
            return self.attributes(self.atom(self.d1_intersect_inner)), False
        words = [self.attributes(self.atom(self.d1_intersect_inner))]
        while self.at("TERM", "NUMBER"):
            words.append(self.attributes(self.atom(self.d1_intersect_inner)))
        return (words[0] if len(words) == 1 else Node("and", children=words)), True

    # -- atoms -----------------------------------------------------------------------------------

    def atom(self, modifier_body) -> Node:
        tok = self.tok
        kind = tok.kind
        if kind == "LP":
            self.advance()
            self.nest()
            if self.at("STAR"):
                if self.dialect < 2:  # RediSearch 2.10's DIALECT 1 has no `(*)`
                    raise syntax_error(self.tok.pos, "")
                self.advance()
                inner = Node("all")
            else:
                inner = self.union() if self.dialect >= 2 else self.d1_intersect()
            if not self.at("RP"):
                raise self.error()
            self.advance()
            self.depth -= 1
            return inner
        if kind in ("MODIFIER", "COMPARE") and self.text_only:
            raise syntax_error(tok.pos, tok.text)
        if kind == "MODIFIER":
            return self.modifier(modifier_body)
        if kind == "COMPARE":
            self.advance()
            return self.comparison(tok)
        if kind == "ISMISSING":
            return self.ismissing()
        if kind == "EXACT":
            self.advance()
            return self.phrase(tok)
        if kind in ("TERM", "NUMBER"):
            self.advance()
            return Node("term", fold(tok.text) if kind == "TERM" else tok.text)
        if kind == "ATTRIBUTE":
            if self.dialect < 2:  # parameters are DIALECT 2's
                raise syntax_error(tok.pos, tok.text)
            self.advance()
            return Node("term", fold(self.param(tok.text, tok.pos)))
        if kind in ("PREFIX", "SUFFIX", "CONTAINS"):
            self.advance()
            word = self.param(tok.text, tok.pos) if tok.value == "$" else tok.text
            return Node({"PREFIX": "prefix", "SUFFIX": "suffix", "CONTAINS": "infix"}[kind], fold(word))
        if kind == "WILDCARD":
            self.advance()
            return Node("wildcard", fold(tok.text))
        if kind == "PERCENT":
            return self.fuzzy()
        if kind == "STAR":
            raise self.error()
        raise self.error()

    def fuzzy(self) -> Node:
        depth = 0
        while self.at("PERCENT"):
            depth += 1
            self.advance()
        if depth > 3 or not self.at("TERM", "NUMBER", "ATTRIBUTE"):
            raise self.error()
        tok = self.advance()
        word = self.param(tok.text, tok.pos) if tok.kind == "ATTRIBUTE" else tok.text
        for _ in range(depth):
            if not self.at("PERCENT"):
                raise self.error()
            self.advance()
        return Node("fuzzy", fold(word), attrs={"distance": depth})

    def phrase(self, tok: Token) -> Node:
        from pion.vector.text import tokenize

        if tok.text == "" and self.dialect >= 2:  # `''` / `""`: the empty value (fields with INDEXEMPTY)
            return Node("emptystr")
        words = tokenize(tok.text)
        if not words:
            return Node("none")
        if len(words) == 1:
            return Node("term", words[0], attrs={"exact": True})
        return Node("phrase", words)

    def modifier(self, body) -> Node:
        names = [self.advance().text]
        while self.at("OR"):  # @a|b:...
            self.advance()
            if not self.at("TERM"):
                raise self.error()
            names.append(self.advance().text)
        if not self.at("COLON"):
            raise self.error()
        colon = self.advance()
        if self.dialect < 2 and self.at("EXACT") and self.tok.text == "":
            raise syntax_error(colon.pos, names[-1])  # DIALECT 1 has no empty value: RediSearch 2.10's text
        if self.at("LB"):
            if len(names) > 1:
                raise self.error()
            return self.tag_list(names[0])
        if self.at("LSQB"):
            if len(names) > 1:
                raise self.error()
            return self.bracket(names[0])
        self.nest()
        if self.dialect >= 2:
            self.text_only += 1
            inner = self.attributes(self.atom_or_prefixed())
            self.text_only -= 1
        elif self.at("MINUS", "TILDE"):
            inner = body()
        else:  # DIALECT 1: the field applies to the next run of words or `|` alternatives, as on 2.10
            inner = self.d1_union()[0]
        self.depth -= 1
        return Node("fields", children=[inner], fields=names)

    def atom_or_prefixed(self) -> Node:
        if self.at("MINUS", "TILDE"):
            kind = "not" if self.advance().kind == "MINUS" else "opt"
            self.nest()
            inner = self.atom_or_prefixed()
            self.depth -= 1
            return Node(kind, children=[inner])
        return self.atom(self.unary)

    def comparison(self, tok: Token) -> Node:
        op = tok.value
        number = self.range_value(self.advance(), False)
        lo, hi, lo_ex, hi_ex = -math.inf, math.inf, False, False
        if op == "==":
            lo = hi = number
        elif op == "!=":
            return Node("not", children=[Node("numeric", (number, number, False, False), fields=[tok.text])])
        elif op == ">":
            lo, lo_ex = number, True
        elif op == ">=":
            lo = number
        elif op == "<":
            hi, hi_ex = number, True
        else:
            hi = number
        return Node("numeric", (lo, hi, lo_ex, hi_ex), fields=[tok.text])

    def ismissing(self) -> Node:
        self.advance()
        if not self.at("LP"):
            raise self.error()
        self.advance()
        if not self.at("MODIFIER"):
            raise self.error()
        if self.text_only:
            raise syntax_error(self.tok.pos, self.tok.text)
        name = self.advance().text
        if not self.at("RP"):
            raise self.error()
        self.advance()
        return Node("missing", fields=[name])

    # raw sections: tags and brackets are scanned from the text, not tokenised
    def _raw_section(self, open_ch: str, close_ch: str) -> tuple[str, int]:
        start = self.tok.pos
        text = self.text
        i = text.find(close_ch, start + 1)
        if i > 0:  # the first closer is the one unless an escape or a quote comes before it
            body = text[start + 1:i]
            if "\\" not in body and (open_ch != "{" or '"' not in body):
                self.lexer.seek(i + 1)
                self.tok = self.lexer.next()
                return body, start + 1
        i = start + 1
        while i < len(text):
            ch = text[i]
            if ch == "\\":
                i += 2
                continue
            if ch == close_ch:
                break
            if ch == '"' and open_ch == "{":
                j = i + 1
                while j < len(text) and text[j] != '"':
                    j += 2 if text[j] == "\\" else 1
                i = j + 1
                continue
            i += 1
        else:
            raise syntax_error(len(text), "<end of query>")
        self.lexer.seek(i + 1)
        self.tok = self.lexer.next()
        return text[start + 1:i], start + 1

    def tag_list(self, name: str) -> Node:
        body, pos = self._raw_section("{", "}")
        items = []
        for raw in _split_unescaped(body, "|"):
            item = raw.strip()
            if not item:
                raise syntax_error(pos, "'|'")
            items.append(self.tag_item(item, pos))
        return Node("tag", items, fields=[name])

    def tag_item(self, item: str, pos: int) -> tuple[str, str]:
        if item.startswith("w'") and item.endswith("'") and len(item) > 2:
            return ("wildcard", _unescape(item[2:-1]))
        if item.startswith('"') and item.endswith('"') and len(item) >= 2:
            return ("exact", _unescape(item[1:-1]))
        if item == "''":  # the empty value, as `""`
            return ("exact", "")
        if item.startswith("$") and _is_plain_name(item[1:]):
            return ("exact", self.param(item[1:], pos))
        starts, ends = item.startswith("*"), item.endswith("*") and not item.endswith("\\*")
        raw = item[1 if starts else 0: len(item) - 1 if ends else len(item)]
        core = _unescape(raw)
        if raw.startswith("$") and _is_plain_name(raw[1:]):  # `\$btc` is the tag `$btc`, not a parameter
            core = self.param(raw[1:], pos)
        if starts and ends:
            return ("infix", core)
        if starts:
            return ("suffix", core)
        if ends:
            return ("prefix", core)
        return ("exact", core)

    def bracket(self, name: str) -> Node:
        body, pos = self._raw_section("[", "]")
        parts = body.split()
        if not parts:
            raise syntax_error(pos, "']'")
        if parts[0].upper() in GEOSHAPE_PREDICATES and self.dialect >= 2:
            if len(parts) != 2 or not parts[1].startswith("$"):
                raise syntax_error(pos, parts[-1])
            return Node("geoshape", (parts[0].upper(), self.param(parts[1][1:], pos)), fields=[name])
        if parts[0].upper() == "VECTOR_RANGE":
            if len(parts) != 3 or not parts[2].startswith("$"):
                raise syntax_error(pos, body)
            radius = self.range_value(Token("RAW", parts[1], pos), False)
            blob_name = parts[2][1:]
            if blob_name not in self.params:
                raise ReplyError(f"No such parameter `{blob_name}`")
            return Node("vrange", (radius, self.params[blob_name]), fields=[name], attrs={"param": blob_name})
        if len(parts) == 4:
            lon, lat, radius = (self.range_value(Token("RAW", p, pos), False) for p in parts[:3])
            unit = parts[3]
            if unit.startswith("$"):
                unit = self.param(unit[1:], pos)
            factor = UNITS.get(unit.lower())
            if factor is None:
                raise ReplyError(f"Invalid GeoFilter unit: {unit}")
            return Node("geo", (lon, lat, radius * factor), fields=[name], attrs={"given": (radius, unit)})
        if len(parts) == 1 and self.dialect >= 2:
            value = self.range_value(Token("RAW", parts[0], pos), False)
            return Node("numeric", (value, value, False, False), fields=[name])
        if len(parts) != 2:
            raise syntax_error(pos, body)
        lo_ex = parts[0].startswith("(")
        hi_ex = parts[1].startswith("(")
        lo = self.range_value(Token("RAW", parts[0].lstrip("("), pos), False)
        hi = self.range_value(Token("RAW", parts[1].lstrip("("), pos), False)
        return Node("numeric", (lo, hi, lo_ex, hi_ex), fields=[name])

    def range_value(self, tok: Token, _unused: bool) -> float:
        raw = tok.text
        sign = 1.0
        if raw.startswith(("-$", "+$")):
            sign = -1.0 if raw[0] == "-" else 1.0
            raw = raw[1:]
        if tok.kind == "ATTRIBUTE":
            raw = "$" + raw
        if raw.startswith("$"):
            raw = self.param(raw[1:], tok.pos)
        try:
            value = float(raw)
        except ValueError:
            raise ReplyError(f"Syntax error at offset {tok.pos} near {raw}") from None
        if math.isnan(value):
            raise ReplyError(f"Syntax error at offset {tok.pos} near {raw}")
        return sign * value

    def attributes(self, node: Node) -> Node:
        if not self.at("ARROW"):
            return node
        arrow = self.advance()
        if not self.at("LB"):
            raise self.error(arrow)
        body, pos = self._raw_section("{", "}")
        node.attrs.update(parse_attributes(body, pos, self.params))
        return node


def _split_unescaped(body: str, sep: str) -> list[str]:
    if "\\" not in body and '"' not in body:
        return body.split(sep)
    out, current, i = [], [], 0
    quoted = False
    while i < len(body):
        ch = body[i]
        if ch == "\\" and i + 1 < len(body):
            current.append(body[i:i + 2])
            i += 2
            continue
        if ch == '"':
            quoted = not quoted
        if ch == sep and not quoted:
            out.append("".join(current))
            current = []
        else:
            current.append(ch)
        i += 1
    out.append("".join(current))
    return out


def _unescape(raw: str) -> str:
    if "\\" not in raw:
        return raw
    return re.sub(r"\\(.)", r"\1", raw)


def _is_plain_name(name: str) -> bool:
    return bool(name) and re.fullmatch(r"[\w.]+", name) is not None
