"""JSONPath for the JSON type: RedisJSON's two path syntaxes over a parsed Python tree.

A JSON document is held as plain Python values (dict, list, str, int, float, bool, None); a
*location* is the tuple of keys (str for an object member, int for an array element) leading to a
value from the root. ``Path`` tells the two syntaxes apart as RedisJSON does: ``$...`` is JSONPath
(every match counts), anything else is a legacy path (``.``, ``.a.b``, ``a[0]``: the first match
counts, and it is rewritten to ``$``-form before compiling).

Supported JSONPath: ``$``, ``.name``, ``['name']``/``["name"]``, ``[n]`` (negative from the end),
``[*]`` and ``.*``, unions ``[0,2]``/``['a','b']``, slices ``[start:end:step]``, recursive descent
``..name``/``..*``/``..[...]``, and filters ``[?(<expr>)]`` with ``@``/``$`` paths, literals,
``== != < <= > >= =~``, ``&& || !`` and parentheses. Why our own: writes need the concrete
locations of matches (to set, delete or append in place), which the maintained Python JSONPath
libraries do not give for RedisJSON's legacy syntax and filter forms.

Guards against hostile paths: the filter grammar and its ``=~`` (RE2, linear time; refused
without it) live in ``json_filter``. Filters nest (parentheses, ``!``, a filter inside a filter's
path) at most ``MAX_NESTING`` levels, and a flat chain of ``&&``/``||`` is one n-ary node
evaluated in a loop, so no path makes the parser or the evaluator recurse past Python's stack.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

from pion.storage.budget import UNLIMITED, Budget
from pion.storage.gc_pause import gc_paused
from pion.storage.json_filter import FilterParser, JsonPathError, eval_filter

Location = tuple  # of str | int

#: how deeply filters may nest (parentheses, ``!``, filters inside a filter's paths)
MAX_NESTING = 128




class Path:
    """A path argument as the client sent it, with RedisJSON's legacy/JSONPath distinction."""

    __slots__ = ("original", "text", "is_legacy")

    def __init__(self, original: str) -> None:
        self.original = original
        if _is_jsonpath(original):
            self.is_legacy = False
            self.text = original
        else:
            self.is_legacy = True
            if original == ".":
                self.text = "$"
            elif original.startswith("."):
                self.text = "$" + original
            else:
                self.text = "$." + original

    @property
    def is_root(self) -> bool:
        return self.text == "$"

    def compile(self) -> CompiledPath:
        return compile_path(self.text)


def _is_jsonpath(text: str) -> bool:
    return text == "$" or text.startswith("$.") or text.startswith("$[")


# -- compiling --------------------------------------------------------------------------------------

_NAME = re.compile(r"[^.\[\]()\s'\"?,*<>=!&|~@]+|\*")


class CompiledPath:
    __slots__ = ("steps", "is_static")

    def __init__(self, steps: list[tuple]) -> None:
        self.steps = steps
        self.is_static = all(step[0] in ("key", "index") for step in steps)

    def find(self, root: Any, budget: Budget = UNLIMITED) -> list[tuple[Any, Location]]:
        """Every match as (value, location), in document order. Every node a step visits
        ticks ``budget`` (past it: ``QueryTimeout``)."""
        nodes: list[tuple[Any, Location]] = [(root, ())]
        tick = budget.tick
        for step in self.steps:
            out: list[tuple[Any, Location]] = []
            for value, loc in nodes:
                out.extend(_apply(step, value, loc, root, tick))
            nodes = out
            if not nodes:
                break
        return nodes

    def values(self, root: Any, budget: Budget = UNLIMITED) -> list[Any]:
        """Every matching value, in document order, without their locations (the reads: no
        location tuple is built per node, and a descent walks an explicit stack)."""
        nodes: list[Any] = [root]
        tick = budget.tick
        for step in self.steps:
            kind = step[0]
            if kind in _SIMPLE or (kind == "desc" and step[1][0] in _SIMPLE):
                out: list[Any] = []
                for value in nodes:
                    out.extend(_apply_value(step, value, tick))
            else:
                out = []
                for value in nodes:
                    out.extend(found for found, _ in _apply(step, value, (), root, tick))
            nodes = out
            if not nodes:
                break
        return nodes


@gc_paused
def compile_path(text: str) -> CompiledPath:
    if not text.startswith("$"):
        raise JsonPathError(f"Error occurred on position 0, expected '$' in path '{text}'")
    parser = _PathParser(text, 1)
    steps = parser.steps(until=None)
    return CompiledPath(steps)


class _PathParser:
    def __init__(self, text: str, pos: int) -> None:
        self.text = text
        self.pos = pos
        self.depth = 0

    def enter(self) -> None:
        self.depth += 1
        if self.depth > MAX_NESTING:
            raise JsonPathError(f"Error occurred on position {self.pos}, filter nested deeper than "
                                f"{MAX_NESTING} levels")

    def error(self, what: str = "a path segment") -> JsonPathError:
        return JsonPathError(f"Error occurred on position {self.pos}, expected {what}")

    def steps(self, until: str | None) -> list[tuple]:
        text = self.text
        steps: list[tuple] = []
        while self.pos < len(text):
            ch = text[self.pos]
            if until is not None and ch in until:
                break
            if ch.isspace() and until is not None:
                break
            if text.startswith("..", self.pos):
                self.pos += 2
                if self.pos < len(text) and text[self.pos] == "[":
                    steps.append(("desc", self.bracket()))
                else:
                    steps.append(("desc", self.dotted()))
            elif ch == ".":
                self.pos += 1
                if self.pos < len(text) and text[self.pos] == "[":  # "$.[0]" is "$[0]"
                    steps.append(self.bracket())
                else:
                    steps.append(self.dotted())
            elif ch == "[":
                steps.append(self.bracket())
            else:
                raise self.error()
        return steps

    def dotted(self) -> tuple:
        match = _NAME.match(self.text, self.pos)
        if match is None:
            raise self.error("a member name")
        self.pos = match.end()
        name = match.group(0)
        return ("wild",) if name == "*" else ("key", name)

    def bracket(self) -> tuple:
        text = self.text
        self.pos += 1  # [
        self.skip_space()
        if text.startswith("?", self.pos):
            self.pos += 1
            self.skip_space()
            wrapped = text.startswith("(", self.pos)
            if wrapped:
                self.pos += 1
            self.enter()
            expr = FilterParser(self, CompiledPath).parse_or()
            self.depth -= 1
            self.skip_space()
            if wrapped:
                self.expect(")")
            self.skip_space()
            self.expect("]")
            return ("filter", expr)
        if text.startswith("*", self.pos):
            self.pos += 1
            self.skip_space()
            self.expect("]")
            return ("wild",)
        items: list[Any] = []
        slice_parts: list[int | None] | None = None
        while True:
            self.skip_space()
            if self.pos < len(text) and text[self.pos] in "'\"":
                items.append(self.string())
            else:
                number = self.maybe_int()
                if self.pos < len(text) and text[self.pos] == ":":
                    slice_parts = [number]
                    while self.pos < len(text) and text[self.pos] == ":":
                        self.pos += 1
                        self.skip_space()
                        slice_parts.append(self.maybe_int())
                    break
                if number is None:
                    raise self.error("a number, a string or '*'")
                items.append(number)
            self.skip_space()
            if self.pos < len(text) and text[self.pos] == ",":
                self.pos += 1
                continue
            break
        self.skip_space()
        self.expect("]")
        if slice_parts is not None:
            start, end, *rest = slice_parts + [None] * (3 - len(slice_parts))
            step = rest[0] if rest and rest[0] is not None else 1
            if step == 0 or step < 0:
                raise self.error("a positive slice step")
            return ("slice", start, end, step)
        if len(items) == 1:
            return ("key", items[0]) if isinstance(items[0], str) else ("index", items[0])
        return ("union", items)

    def string(self) -> str:
        text = self.text
        quote = text[self.pos]
        self.pos += 1
        out: list[str] = []
        while self.pos < len(text):
            ch = text[self.pos]
            if ch == "\\" and self.pos + 1 < len(text):
                out.append(text[self.pos + 1])
                self.pos += 2
                continue
            if ch == quote:
                self.pos += 1
                return "".join(out)
            out.append(ch)
            self.pos += 1
        raise self.error(f"closing {quote}")

    def maybe_int(self) -> int | None:
        match = _INT.match(self.text, self.pos)
        if match is None:
            return None
        self.pos = match.end()
        return int(match.group(0))

    def skip_space(self) -> None:
        if self.text.startswith(" ", self.pos):
            self.pos = _SPACES.match(self.text, self.pos).end()  # type: ignore[union-attr]

    def expect(self, token: str) -> None:
        if not self.text.startswith(token, self.pos):
            raise self.error(f"'{token}'")
        self.pos += len(token)


_SPACES = re.compile(" *")
_INT = re.compile(r"-?\d+")


# -- evaluation -------------------------------------------------------------------------------------


def _children(value: Any, loc: Location) -> Iterator[tuple[Any, Location]]:
    if isinstance(value, dict):
        for key, item in value.items():
            yield item, loc + (key,)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield item, loc + (i,)


def _descendants(value: Any, loc: Location, tick: Callable[..., None]) -> list[tuple[Any, Location]]:
    """The node itself and every node below it, in document (pre-)order (an explicit stack:
    no generator per level, no recursion limit)."""
    out: list[tuple[Any, Location]] = []
    stack = [(value, loc)]
    while stack:
        node, node_loc = stack.pop()
        out.append((node, node_loc))
        if isinstance(node, dict):
            tick(len(node))
            stack.extend(reversed([(item, node_loc + (key,)) for key, item in node.items()]))
        elif isinstance(node, list):
            tick(len(node))
            stack.extend(reversed([(item, node_loc + (i,)) for i, item in enumerate(node)]))
    return out


def _descendant_values(value: Any, tick: Callable[..., None]) -> list[Any]:
    """``_descendants`` without the locations."""
    out: list[Any] = []
    stack = [value]
    while stack:
        node = stack.pop()
        out.append(node)
        if isinstance(node, dict):
            tick(len(node))
            stack.extend(reversed(node.values()))
        elif isinstance(node, list):
            tick(len(node))
            stack.extend(reversed(node))
    return out


def _descendant_children(value: Any, tick: Callable[..., None]) -> list[Any]:
    """``..*``: the children of every node, nodes taken in document (pre-)order."""
    out: list[Any] = []
    stack = [value]
    pop = stack.pop
    push = stack.extend
    add = out.extend
    while stack:
        node = pop()
        cls = node.__class__
        if cls is dict:
            kids = list(node.values())
        elif cls is list:
            kids = node
        else:
            continue
        tick(len(kids))
        add(kids)
        push(reversed(kids))
    return out


#: steps whose matches need neither a location nor the document's root
_SIMPLE = ("key", "index", "wild")


def _apply_value(step: tuple, value: Any, tick: Callable[..., None]) -> list[Any]:
    """``_apply`` for the steps that need no location nor the root (``values``)."""
    kind = step[0]
    if kind == "key":
        if isinstance(value, dict) and step[1] in value:
            return [value[step[1]]]
        return []
    if kind == "index":
        if isinstance(value, list):
            i = step[1] + len(value) if step[1] < 0 else step[1]
            if 0 <= i < len(value):
                return [value[i]]
        return []
    if kind == "wild":
        if isinstance(value, dict):
            tick(len(value))
            return list(value.values())
        if isinstance(value, list):
            tick(len(value))
            return list(value)
        return []
    inner = step[1]  # desc over a simple step
    if inner[0] == "wild":
        return _descendant_children(value, tick)
    out: list[Any] = []
    for node in _descendant_values(value, tick):
        out.extend(_apply_value(inner, node, tick))
    return out


def _apply(step: tuple, value: Any, loc: Location, root: Any,
           tick: Callable[..., None] = UNLIMITED.tick) -> list[tuple[Any, Location]]:
    kind = step[0]
    if kind == "key":
        name = step[1]
        if isinstance(value, dict) and name in value:
            return [(value[name], loc + (name,))]
        return []
    if kind == "index":
        if isinstance(value, list):
            i = step[1] + len(value) if step[1] < 0 else step[1]
            if 0 <= i < len(value):
                return [(value[i], loc + (i,))]
        return []
    if kind == "wild":
        found = list(_children(value, loc))
        tick(len(found))
        return found
    if kind == "union":
        out: list[tuple[Any, Location]] = []
        for item in step[1]:
            out.extend(_apply(("key", item) if isinstance(item, str) else ("index", item), value, loc, root, tick))
        return out
    if kind == "slice":
        if not isinstance(value, list):
            return []
        _, start, end, stride = step
        indexes = range(len(value))[slice(start, end, stride)]
        tick(len(indexes))
        return [(value[i], loc + (i,)) for i in indexes]
    if kind == "filter":
        out = []
        for child, child_loc in _children(value, loc):
            tick(4)
            if eval_filter(step[1], child, root):
                out.append((child, child_loc))
        return out
    if kind == "desc":
        inner = step[1]
        out = []
        for node, node_loc in _descendants(value, loc, tick):
            out.extend(_apply(inner, node, node_loc, root, tick))
        return out
    raise JsonPathError(f"unknown path step {kind}")


# -- locations ---------------------------------------------------------------------------------------


def get_at(root: Any, loc: Location) -> Any:
    for key in loc:
        root = root[key]
    return root


def parent_of(root: Any, loc: Location) -> tuple[Any, Any]:
    """(container, key) that holds the value at ``loc`` (``loc`` must not be the root)."""
    return get_at(root, loc[:-1]), loc[-1]


def order_for_mutation(locations: list[Location], drop_nested: bool = True) -> list[Location]:
    """Deeper locations first and higher array indexes first, so no change invalidates a later
    location (RedisJSON's prepare_paths_for_updating); with ``drop_nested`` a location inside
    another matched one is dropped (deleting the ancestor removes it anyway)."""
    ordered = sorted(set(locations), key=_mutation_key)
    if not drop_nested:
        return ordered
    chosen = set(ordered)
    return [loc for loc in ordered if not any(loc[:i] in chosen for i in range(len(loc)))]


def _mutation_key(loc: Location) -> tuple:
    # deeper first; within a level, object keys before array indexes, higher indexes first
    parts = tuple((0, part, 0) if isinstance(part, str) else (1, "", -part) for part in loc)
    return (-len(loc), parts)
