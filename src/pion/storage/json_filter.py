"""JSONPath filter expressions (``[?(<expr>)]``): their grammar and their evaluation.

Split from ``json_path`` (which owns paths and their evaluation) because the filter language is a
grammar of its own: ``@``/``$`` operands, literals, ``== != < <= > >= =~``, ``&& || !`` and
parentheses, with RedisJSON's typing rules (values of different JSON kinds are never equal, only
numbers and strings order). ``=~`` runs RE2 (``google-re2``, the ``search`` extra), a linear-time
search as RedisJSON's Rust ``regex`` does; a pattern RE2 cannot run, or no RE2 at all, is refused
rather than handed to backtracking ``re``. ``JsonPathError`` lives here so both modules raise the
one error class without importing each other in a cycle; ``json_path`` re-exports it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

RE2_HINT = ("JSONPath '=~' needs the google-re2 package (linear-time regular expressions): "
            "pip install 'pion[search]'")


class JsonPathError(ValueError):
    """A path that does not parse; the message is RedisJSON's style of error text."""


#: a filter operand that is a plain ``@.a.b`` / ``$.x`` path ending where steps(until=...) stops:
#: its key steps in one match (anything else, steps() itself)
_DOTTED_OPERAND = re.compile(r"[@$]((?:\.[^.\[\]()\s'\"?,*<>=!&|~@]++)++)(?=[\s)=!<>&|,]|\Z)")
_NUMBER = re.compile(r"-?\d+(\.\d+)?([eE][-+]?\d+)?")
_OPS = ("==", "!=", "<=", ">=", "=~", "<", ">")
_MISSING = object()


class FilterParser:
    """Recursive descent over the shared path parser's text; builds nested tuples.

    ``outer`` is json_path's path parser (its position, ``steps``, ``string``, ``error``);
    ``make_path`` builds a compiled path from steps (passed in so this module needs no import
    of json_path)."""

    def __init__(self, outer: Any, make_path: Callable[[list], Any]) -> None:
        self.p = outer
        self.make_path = make_path

    def parse_or(self) -> tuple:
        items = [self.parse_and()]
        while self.peek("||"):
            self.p.pos += 2
            items.append(self.parse_and())
        return items[0] if len(items) == 1 else ("or", items)

    def parse_and(self) -> tuple:
        items = [self.parse_not()]
        while self.peek("&&"):
            self.p.pos += 2
            items.append(self.parse_not())
        return items[0] if len(items) == 1 else ("and", items)

    def parse_not(self) -> tuple:
        negations = 0
        while self.peek("!") and not self.peek("!="):
            self.p.pos += 1
            negations += 1
            self.p.enter()
        expr = self.parse_compare()
        self.p.depth -= negations
        for _ in range(negations):
            expr = ("not", expr)
        return expr

    def parse_compare(self) -> tuple:
        if self.peek("("):
            self.p.pos += 1
            self.p.enter()
            inner = self.parse_or()
            self.p.depth -= 1
            self.p.skip_space()
            self.p.expect(")")
            return inner
        left = self.operand()
        p = self.p
        p.skip_space()
        two = p.text[p.pos:p.pos + 2]
        op = two if two in _OPS else two[:1] if two[:1] in ("<", ">") else None
        if op is None:
            return ("exists", left)
        p.pos += len(op)
        right = self.operand()
        if op == "=~":
            if right[0] != "lit" or not isinstance(right[1], str):
                raise p.error("a regular expression string")
            right = ("re", compile_regex(right[1]))
        return ("cmp", op, left, right)

    def operand(self) -> tuple:
        p = self.p
        p.skip_space()
        text = p.text
        if p.pos >= len(text):
            raise p.error("an operand")
        ch = text[p.pos]
        if ch in "@$":
            dotted = _DOTTED_OPERAND.match(text, p.pos)
            if dotted is not None:
                p.pos = dotted.end()
                return ("path", ch, self.make_path([("key", name) for name in dotted.group(1)[1:].split(".")]))
            p.pos += 1
            steps = p.steps(until=" )=!<>&|,")
            return ("path", ch, self.make_path(steps))
        if ch in "'\"":
            return ("lit", p.string())
        match = _NUMBER.match(text, p.pos)
        if match is not None:
            p.pos = match.end()
            raw = match.group(0)
            return ("lit", float(raw) if "." in raw or "e" in raw or "E" in raw else int(raw))
        for word, value in (("true", True), ("false", False), ("null", None)):
            if text.startswith(word, p.pos):
                p.pos += len(word)
                return ("lit", value)
        raise p.error("an operand")

    def peek(self, token: str) -> bool:
        self.p.skip_space()
        return self.p.text.startswith(token, self.p.pos)


def compile_regex(pattern: str) -> Any:
    """``=~``'s pattern as an RE2 regex (linear-time search, RedisJSON's Rust ``regex`` syntax);
    refused when RE2 cannot run it or is not installed, never handed to backtracking ``re``."""
    try:
        import re2
    except ImportError:
        raise JsonPathError(RE2_HINT) from None
    options = re2.Options()
    options.log_errors = False  # the refusal goes to the client, not to the server's stderr
    options.never_capture = True  # =~ asks only whether it matches
    try:
        return re2.compile(pattern, options=options)
    except re2.error as exc:
        reason = exc.args[0] if exc.args else exc
        if isinstance(reason, bytes):
            reason = reason.decode("utf-8", "replace")
        raise JsonPathError(f"invalid regular expression '{pattern}': {reason} "
                            "(linear-time RE2 syntax: no backreferences or lookaround)") from None


def eval_filter(expr: tuple, current: Any, root: Any) -> bool:
    kind = expr[0]
    if kind == "or":
        return any(eval_filter(item, current, root) for item in expr[1])
    if kind == "and":
        return all(eval_filter(item, current, root) for item in expr[1])
    if kind == "not":
        return not eval_filter(expr[1], current, root)
    if kind == "exists":
        value = _operand_value(expr[1], current, root)
        return value is not _MISSING and (expr[1][0] != "lit" or bool(value))
    _, op, left_expr, right_expr = expr
    left = _operand_value(left_expr, current, root)
    if left is _MISSING:
        return False
    if op == "=~":
        return isinstance(left, str) and right_expr[1].search(left) is not None
    right = _operand_value(right_expr, current, root)
    if right is _MISSING:
        return False
    return _compare(op, left, right)


def _operand_value(expr: tuple, current: Any, root: Any) -> Any:
    if expr[0] == "lit":
        return expr[1]
    base = current if expr[1] == "@" else root
    found = expr[2].values(base)
    return found[0] if found else _MISSING


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if value is True or value is False:
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _compare(op: str, left: Any, right: Any) -> bool:
    same = _kind(left) == _kind(right)
    if op == "==":
        return same and left == right
    if op == "!=":
        return not (same and left == right)
    if not same or _kind(left) not in ("number", "string"):
        return False
    if op == "<":
        return left < right
    if op == "<=":
        return left <= right
    if op == ">":
        return left > right
    return left >= right
