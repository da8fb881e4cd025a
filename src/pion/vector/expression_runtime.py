"""What the compiled APPLY/FILTER expressions run (``expressions`` makes the closures that call
these): RediSearch's value rules (a string that parses as a number takes part in arithmetic as
that number, a missing property makes arithmetic None and comparisons false), its operators, the
number spelling of its replies (``format_value``) and the function library (math, strings,
``exists``, ``case``, dates, ``geodistance``), looked up by ``function``.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable
from typing import Any

from pion.protocol.errors import ReplyError

Expr = Callable[[dict[str, Any]], Any]


def _add(a: float, b: float) -> float:
    return a + b


def _sub(a: float, b: float) -> float:
    return a - b


def _mul(a: float, b: float) -> float:
    return a * b


ADDITIVE: dict[str, Callable] = {"+": _add, "-": _sub}


def truth(value: Any) -> bool:
    if value is None:
        return False
    if isinstance(value, str):
        number = _parse_number(value)
        return bool(number) if number is not None else bool(value)
    return bool(value)


def _parse_number(value: Any) -> float | None:
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


def num(value: Any) -> float | None:
    return _parse_number(value)


def binary(left: Expr, right: Expr, op) -> Expr:
    def run(row: dict[str, Any]) -> Any:
        a, b = num(left(row)), num(right(row))
        if a is None or b is None:
            return None
        try:
            return float(op(a, b))
        except (ZeroDivisionError, OverflowError, ValueError):
            return math.nan
    return run


def _div(a: float, b: float) -> float:
    if b == 0:
        return math.nan if a == 0 else math.copysign(math.inf, a)
    return a / b


def _mod(a: float, b: float) -> float:
    if int(b) == 0:
        return math.nan
    return float(int(a) % int(b))


def power(a: float, b: float) -> float:
    return math.pow(a, b)


MULTIPLICATIVE: dict[str, Callable] = {"*": _mul, "/": _div, "%": _mod}


def compare(op: str, a: Any, b: Any) -> float:
    if a is None or b is None:
        if op == "!=":
            return 1.0 if (a is None) != (b is None) else 0.0
        return 1.0 if op == "==" and a is None and b is None else 0.0
    na, nb = num(a), num(b)
    if na is not None and nb is not None and not (isinstance(a, str) and isinstance(b, str) and (
            _parse_number(a) is None or _parse_number(b) is None)):
        x, y = na, nb
    else:
        x, y = str(a), str(b)
    result = {"==": x == y, "!=": x != y, "<": x < y, "<=": x <= y, ">": x > y, ">=": x >= y}[op]
    return 1.0 if result else 0.0


# -- functions --------------------------------------------------------------------------------------


def _text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, float):
        return format_value(value)
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _math1(fn):
    def make(args, pos):
        _arity(args, 1, 1, pos)
        (a,) = args
        def run(row):
            x = num(a(row))
            if x is None:
                return None
            try:
                return float(fn(x))
            except (ValueError, OverflowError):
                return math.nan
        return run
    return make


def _arity(args: list, lo: int, hi: int, pos: int) -> None:
    if not lo <= len(args) <= hi:
        raise ReplyError("Invalid arguments for function")


def _f_pow(args, pos):
    _arity(args, 2, 2, pos)
    return binary(args[0], args[1], power)


def _f_exists(args, pos):
    _arity(args, 1, 1, pos)
    return lambda row: 1.0 if args[0](row) is not None else 0.0


def _f_case(args, pos):
    _arity(args, 3, 3, pos)
    cond, yes, no = args
    return lambda row: yes(row) if truth(cond(row)) else no(row)


def _str1(fn):
    def make(args, pos):
        _arity(args, 1, 1, pos)
        return lambda row: None if (s := _text(args[0](row))) is None else fn(s)
    return make


def _f_substr(args, pos):
    _arity(args, 3, 3, pos)
    def run(row):
        s = _text(args[0](row))
        if s is None:
            return None
        offset, count = int(num(args[1](row)) or 0), int(num(args[2](row)) or 0)
        if offset < 0:
            offset = max(0, len(s) + offset)
        return s[offset:] if count < 0 else s[offset:offset + count]
    return run


def _f_contains(args, pos):
    _arity(args, 2, 2, pos)
    def run(row):
        s, sub = _text(args[0](row)), _text(args[1](row))
        if s is None or sub is None:
            return 0.0
        return float(s.count(sub)) if sub else float(len(s) + 1)
    return run


def _f_startswith(args, pos):
    _arity(args, 2, 2, pos)
    return lambda row: 1.0 if (s := _text(args[0](row))) is not None and s.startswith(_text(args[1](row)) or "") else 0.0


def _f_endswith(args, pos):
    _arity(args, 2, 2, pos)
    return lambda row: 1.0 if (s := _text(args[0](row))) is not None and s.endswith(_text(args[1](row)) or "") else 0.0


def _f_format(args, pos):
    if not args:
        raise ReplyError("Invalid arguments for function")
    def run(row):
        fmt = _text(args[0](row)) or ""
        values = [a(row) for a in args[1:]]
        out, j, i = [], 0, 0
        while i < len(fmt):
            if fmt[i] == "%" and i + 1 < len(fmt):
                if fmt[i + 1] == "%":
                    out.append("%")
                elif fmt[i + 1] == "s":
                    out.append(_text(values[j]) if j < len(values) and values[j] is not None else "(null)")
                    j += 1
                i += 2
                continue
            out.append(fmt[i])
            i += 1
        return "".join(out)
    return run


def _f_split(args, pos):
    _arity(args, 1, 3, pos)
    def run(row):
        s = _text(args[0](row))
        if s is None:
            return None
        seps = _text(args[1](row)) if len(args) > 1 else ","
        strip = _text(args[2](row)) if len(args) > 2 else " "
        parts = re.split("|".join(re.escape(c) for c in (seps or ",")), s)
        return [p.strip(strip) for p in parts if p.strip(strip)]
    return run


def _f_to_number(args, pos):
    _arity(args, 1, 1, pos)
    return lambda row: num(args[0](row))


def _f_to_str(args, pos):
    _arity(args, 1, 1, pos)
    return lambda row: _text(args[0](row))


def _time_part(fmt_fn):
    def make(args, pos):
        _arity(args, 1, 1, pos)
        def run(row):
            t = num(args[0](row))
            return None if t is None else float(fmt_fn(time.gmtime(int(t)), int(t)))
        return run
    return make


def _f_timefmt(args, pos):
    _arity(args, 1, 2, pos)
    def run(row):
        t = num(args[0](row))
        if t is None:
            return None
        fmt = _text(args[1](row)) if len(args) > 1 else "%FT%TZ"
        fmt = fmt.replace("%F", "%Y-%m-%d").replace("%T", "%H:%M:%S")
        return time.strftime(fmt, time.gmtime(int(t)))
    return run


def _f_parsetime(args, pos):
    _arity(args, 2, 2, pos)
    def run(row):
        s, fmt = _text(args[0](row)), _text(args[1](row))
        if s is None or fmt is None:
            return None
        import calendar

        try:
            return float(calendar.timegm(time.strptime(s, fmt.replace("%F", "%Y-%m-%d").replace("%T", "%H:%M:%S"))))
        except ValueError:
            return None
    return run


def _f_geodistance(args, pos):
    from pion.vector.fields import EARTH_RADIUS_M

    if len(args) not in (2, 3, 4):
        raise ReplyError("Invalid arguments for function")

    def point(values):
        if len(values) == 2:
            return num(values[0]), num(values[1])
        text = _text(values[0])
        if text is None:
            return None, None
        parts = text.replace(",", " ").split()
        if len(parts) != 2:
            return None, None
        return num(parts[0]), num(parts[1])

    def run(row):
        vals = [a(row) for a in args]
        # two points, each a "lon,lat" text or two numbers: (p, p), (p, lon, lat), (lon, lat, p), (lon, lat, lon, lat)
        first = 1 if len(vals) == 2 or (len(vals) == 3 and num(vals[0]) is None) else 2
        lon1, lat1 = point(vals[:first])
        lon2, lat2 = point(vals[first:])
        if None in (lon1, lat1, lon2, lat2):
            return None
        la1, la2 = math.radians(lat1), math.radians(lat2)
        u = math.sin((la2 - la1) / 2)
        v = math.sin(math.radians(lon2 - lon1) / 2)
        meters = 2.0 * EARTH_RADIUS_M * math.asin(math.sqrt(u * u + math.cos(la1) * math.cos(la2) * v * v))
        return round(meters * 100) / 100  # RediSearch answers centimetres: 13953.93
    return run


_FUNCTIONS: dict[str, Callable] = {
    "log": _math1(math.log), "log2": _math1(math.log2), "exp": _math1(math.exp), "ceil": _math1(math.ceil),
    "floor": _math1(math.floor), "abs": _math1(abs), "sqrt": _math1(math.sqrt), "pow": _f_pow,
    "exists": _f_exists, "case": _f_case, "upper": _str1(str.upper), "lower": _str1(str.lower),
    "strlen": _str1(lambda s: float(len(s))), "substr": _f_substr, "contains": _f_contains,
    "startswith": _f_startswith, "endswith": _f_endswith, "format": _f_format, "split": _f_split,
    "to_number": _f_to_number, "to_str": _f_to_str, "timefmt": _f_timefmt, "parsetime": _f_parsetime,
    "hour": _time_part(lambda t, s: s - s % 3600), "minute": _time_part(lambda t, s: s - s % 60),
    "day": _time_part(lambda t, s: s - s % 86400), "month": _time_part(
        lambda t, s: __import__("calendar").timegm((t.tm_year, t.tm_mon, 1, 0, 0, 0))),
    "year": _time_part(lambda t, s: t.tm_year), "dayofweek": _time_part(lambda t, s: (t.tm_wday + 1) % 7),
    "dayofmonth": _time_part(lambda t, s: t.tm_mday), "dayofyear": _time_part(lambda t, s: t.tm_yday - 1),
    "monthofyear": _time_part(lambda t, s: t.tm_mon - 1), "geodistance": _f_geodistance,
}


def function(name: str, args: list[Expr], pos: int) -> Expr:
    maker = _FUNCTIONS.get(name.lower())
    if maker is None:
        raise ReplyError(f"Unknown function name '{name}'")
    return maker(args, pos)


def format_value(value: Any) -> str:
    """RediSearch's number spelling (``num_to_str``): integers as such, else ``%.12g``."""
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        if value == int(value) and -(2**63) <= value < 2**63:
            return str(int(value))
        return "%.12g" % value
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)
