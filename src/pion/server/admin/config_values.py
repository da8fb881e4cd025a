"""Parsing and checking of configuration values, with the error texts of Redis's config.c.

Each function takes the raw text and returns the normalized text CONFIG GET shows, or raises
``ConfigError`` whose message is what Redis puts after ``CONFIG SET failed (...) - ``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable

from pion.config import ConfigError
from pion.protocol.errors import ReplyError
from pion.server.args import parse_int

#: (value after the type check, current value) -> normalized value
Check = Callable[[str, str], str]

OBUF_DEFAULT = "normal 0 0 0 slave 268435456 67108864 60 pubsub 33554432 8388608 60"
_UNITS = {"": 1, "b": 1, "k": 1000, "kb": 1024, "m": 1000**2, "mb": 1024**2, "g": 1000**3, "gb": 1024**3}
_NOTIFY_ALL = "g$lshzxetd"
_STRTOLL = re.compile(r"\s*([+-]?\d*)")


def parse_yes_no(raw: str) -> str:
    low = raw.lower()
    if low not in ("yes", "no"):
        raise ConfigError("argument must be 'yes' or 'no'")
    return low


def parse_enum(raw: str, choices: tuple[str, ...]) -> str:
    for choice in choices:
        if raw.lower() == choice:
            return choice
    raise ConfigError("argument(s) must be one of the following: " + ", ".join(choices))


def memtoull(text: str) -> int | None:
    """Redis's memtoull: digits then an optional unit (``1gb`` = 1024**3, ``1g`` = 1000**3)."""
    if text.startswith("-"):
        return None
    digits = text[: len(text) - len(text.lstrip("0123456789"))]
    unit = text[len(digits):].lower()
    if unit not in _UNITS:
        return None
    return (int(digits) if digits else 0) * _UNITS[unit]


def parse_number(kind: str, raw: str, lower: int, upper: int) -> str:
    """int, memory, memory-or-percent and octal parameters, bounds checked as numericBoundaryCheck."""
    value = _number(kind, raw)
    if kind == "mempercent" and value < 0:
        if value < lower:
            raise ConfigError(f"percentage argument must be less or equal to {-lower}")
        return f"{-value}%"
    if not lower <= value <= upper:
        if kind == "octal":
            raise ConfigError(f"argument must be between {lower:o} and {upper:o} inclusive")
        raise ConfigError(f"argument must be between {lower} and {upper} inclusive")
    return f"{value:o}" if kind == "octal" else str(value)


def _number(kind: str, raw: str) -> int:
    if kind in ("memory", "mempercent"):
        value = memtoull(raw)
        if value is not None:
            return value
        if kind == "mempercent" and len(raw) > 1 and raw.endswith("%"):
            number = _string2ll(raw[:-1])
            if number is not None and number >= 0:
                return -number
        raise ConfigError("argument must be a memory or percent value" if kind == "mempercent"
                          else "argument must be a memory value")
    if kind == "octal":
        if re.fullmatch(r"\s*[+-]?[0-7]+", raw):
            return int(raw, 8)
        raise ConfigError("argument couldn't be parsed as an octal number")
    number = _string2ll(raw)
    if number is None:
        raise ConfigError("argument couldn't be parsed into an integer")
    return number


def _string2ll(text: str) -> int | None:
    try:
        return parse_int(text.encode("utf-8", "surrogateescape"))
    except ReplyError:
        return None


def _strtoll(text: str) -> tuple[int, str]:
    """C's strtoll: the number at the start (0 if none) and what is left after it."""
    match = _STRTOLL.match(text)
    digits = match.group(1) if match else ""
    try:
        return int(digits), text[match.end():] if match else text
    except ValueError:
        return 0, text


# -- special parameters -------------------------------------------------------------------------


def check_save(value: str, current: str) -> str:
    args = [] if value == "" else value.split(" ")
    if len(args) % 2:
        raise ConfigError("Invalid save parameters")
    numbers = []
    for j, arg in enumerate(args):
        number, rest = _strtoll(arg)
        if rest or (j % 2 == 0 and number < 1) or (j % 2 == 1 and number < 0):
            raise ConfigError("Invalid save parameters")
        numbers.append(str(number))
    return " ".join(numbers)


def parse_obuf(text: str) -> dict[str, tuple[int, int, int]]:
    """``normal 0 0 0 slave ...`` -> class -> (hard, soft, soft seconds)."""
    words = text.split()
    return {words[j]: (int(words[j + 1]), int(words[j + 2]), int(words[j + 3])) for j in range(0, len(words) - 3, 4)}


def check_obuf(value: str, current: str) -> str:
    args = value.split(" ")
    if len(args) % 4:
        raise ConfigError("Wrong number of arguments in buffer limit configuration.")
    limits = parse_obuf(current or OBUF_DEFAULT)
    for j in range(0, len(args), 4):
        name = {"replica": "slave"}.get(args[j].lower(), args[j].lower())
        if name not in ("normal", "slave", "pubsub"):
            raise ConfigError("Invalid client class specified in buffer limit configuration.")
        hard, soft = memtoull(args[j + 1]), memtoull(args[j + 2])
        seconds, rest = _strtoll(args[j + 3])
        if hard is None or soft is None or seconds < 0 or rest:
            raise ConfigError("Error in hard, soft or soft_seconds setting in buffer limit configuration.")
        limits[name] = (hard, soft, seconds)
    return " ".join(f"{name} {h} {s} {sec}" for name, (h, s, sec) in sorted(
        limits.items(), key=lambda item: ("normal", "slave", "pubsub").index(item[0])))


def check_oom_values(value: str, current: str) -> str:
    args = value.split(" ")
    if len(args) != 3:
        raise ConfigError("wrong number of arguments")
    numbers = []
    for arg in args:
        number, rest = _strtoll(arg)
        if rest or not -2000 <= number <= 2000:
            raise ConfigError("Invalid oom-score-adj-values, elements must be between -2000 and 2000.")
        numbers.append(str(number))
    return " ".join(numbers)


def check_notify(value: str, current: str) -> str:
    """Redis's keyspaceEventsStringToFlags then FlagsToString: ``KEA`` -> ``AKE`` (``An`` -> ``A``)."""
    if any(ch not in _NOTIFY_ALL + "AKEmn" for ch in value):
        raise ConfigError("Invalid event class character. Use 'Ag$lshzxeKEtmdn'.")
    flags = set(value) | (set(_NOTIFY_ALL) if "A" in value else set())
    out = "A" if set(_NOTIFY_ALL) <= flags else "".join(ch for ch in _NOTIFY_ALL + "n" if ch in flags)
    return out + "".join(ch for ch in "KEm" if ch in flags)


def check_bind(value: str, current: str) -> str:
    args = [] if value == "" else value.split(" ")
    if len(args) > 16:
        raise ConfigError("Too many bind addresses specified.")
    return " ".join(args)


def check_replicaof(value: str, current: str) -> str:
    args = value.split(" ")
    if len(args) != 2:
        raise ConfigError("wrong number of arguments")
    if args[0].lower() == "no" and args[1].lower() == "one":
        return ""
    port, rest = _strtoll(args[1])
    if rest or not 0 <= port <= 65535:
        raise ConfigError("Invalid master port")
    return f"{args[0]} {port}"


def check_percentiles(value: str, current: str) -> str:
    args = [] if value == "" else value.split(" ")
    out = []
    for arg in args:
        try:
            number = float(arg)
        except ValueError:
            raise ConfigError("Invalid latency-tracking-info-percentiles parameters") from None
        if not 0.0 <= number <= 100.0:
            raise ConfigError("latency-tracking-info-percentiles parameters should sit between [0.0,100.0]")
        out.append(("%f" % number).rstrip("0").rstrip("."))
    return " ".join(out)


def check_dir(value: str, current: str) -> str:
    if not os.path.isdir(value):
        raise ConfigError("No such file or directory")
    return os.path.abspath(value)


def check_dbfilename(value: str, current: str) -> str:
    if os.path.basename(value) != value:
        raise ConfigError("dbfilename can't be a path, just a filename")
    return value


def check_hostname(value: str, current: str) -> str:
    if len(value) >= 256:
        raise ConfigError("Hostnames must be less than 256 characters")
    if not re.fullmatch(r"[A-Za-z0-9.-]*", value):
        raise ConfigError("Hostnames may only contain alphanumeric characters, hyphens or dots")
    return value


def check_title(value: str, current: str) -> str:
    names = re.findall(r"\{([^}]*)\}", value)
    known = {"title", "listen-addr", "server-mode", "port", "tls-port", "unixsocket", "config-file"}
    if value.count("{") != len(names) or value.count("}") != len(names) or not set(names) <= known:
        raise ConfigError("template format is invalid or contains unknown variables")
    return value


def check_activedefrag(value: str, current: str) -> str:
    if value == "yes":
        raise ConfigError(
            "Active defragmentation cannot be enabled: it requires a Redis server compiled with a modified "
            "Jemalloc like the one shipped by default with the Redis source distribution")
    return value


def check_maxmemory_clients(value: str, current: str) -> str:
    """Client eviction is not built: only 0 (off) is accepted, so no limit is silently ignored."""
    if value not in ("0", "0%"):
        raise ConfigError("client eviction (maxmemory-clients) is not supported by Pion; only 0 (off) is accepted. "
                          "Use maxclients and client-query-buffer-limit to bound clients")
    return value


def check_tls_port(value: str, current: str) -> str:
    """The TLS listener opens at start only (``--tls-port``); CONFIG SET cannot move it."""
    if value != current:
        raise ConfigError("tls-port can only be set at startup (--tls-port); restart the server to change it")
    return value
