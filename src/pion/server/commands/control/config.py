"""CONFIG GET / SET / RESETSTAT / REWRITE / HELP, with Redis 7's reply shapes and error texts.

Every Redis 7 parameter is known (``config_table``); the ones Pion has a ``Settings`` field for are
converted through ``pion.config.PARAMETERS``, the others are kept, normalized, in
``Settings.extra``. CONFIG SET of several parameters is atomic: all are checked, the new settings
are applied, and any failure (a value, a listener that cannot bind, an engine's config hook)
leaves the old settings in place.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from pion.config import PARAMETERS, ConfigError, Settings
from pion.protocol import errors
from pion.protocol.errors import ReplyError
from pion.protocol.resp import OK
from pion.server.admin import config_table as table
from pion.server.admin.config_rewrite import apply_listeners, rewrite_config_file
from pion.server.admin.info import reset_stats
from pion.server.context import Ctx
from pion.server.registry import command
from pion.storage.glob import glob_match

_ADMIN = "admin noscript loading stale"
_CATS = "@admin @slow @dangerous"
#: Settings fields that are not CONFIG parameters
_INTERNAL = {"config-file", "tenant", "tenants-file", "embed-api-key", "user"}  # passwords and keys: never shown
_FIELD_NAMES = {f.name for f in fields(Settings)}

HELP = [
    "CONFIG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "GET <pattern>",
    "    Return parameters matching the glob-like <pattern> and their values.",
    "SET <directive> <value>",
    "    Set the configuration <directive> to <value>.",
    "RESETSTAT",
    "    Reset statistics reported by the INFO command.",
    "REWRITE",
    "    Rewrite the configuration file.",
    "HELP",
    "    Prints this help.",
]


def all_names() -> list[str]:
    """Every name CONFIG GET * shows: Redis's parameters and aliases, then Pion's own."""
    names = [name for name, param in table.LOOKUP.items() if not param.flags & table.HIDDEN]
    return names + [name for name in PARAMETERS if name not in table.LOOKUP and name not in _INTERNAL]


def find(name: str) -> str | None:
    """The canonical name for a parameter name or alias (any case), or None."""
    low = name.lower()
    param = table.LOOKUP.get(low)
    if param is not None:
        return param.name
    return low if low in PARAMETERS and low not in _INTERNAL else None


def current_value(settings: Settings, name: str) -> str:
    """A parameter's value as CONFIG GET shows it."""
    canonical = find(name) or name
    entry = PARAMETERS.get(canonical)
    param = table.PARAMS.get(canonical)
    if entry is not None and entry[0] in _FIELD_NAMES:
        field_name, _, fmt = entry
        value = getattr(settings, field_name)
        text = ("yes" if value else "no") if isinstance(value, bool) else fmt(value)  # type: ignore[operator]
        try:
            return table.normalize(param, text, text) if param is not None else text
        except ConfigError:
            return text
    extra = dict(settings.extra)
    keys = [canonical] + ([param.alias] if param is not None and param.alias else [])
    raw = next((extra[key] for key in keys if key in extra), None)
    if param is None:
        return raw or ""
    if raw is None:
        return param.default
    try:
        return table.normalize(param, raw, param.default)
    except ConfigError:
        return raw


@command("CONFIG|GET", -3, _ADMIN, categories=_CATS, group="server", since="2.0.0")
def config_get(ctx: Ctx, argv: list[bytes]):
    """CONFIG GET parameter [parameter ...]"""
    settings = ctx.server.settings
    matches: dict[str, str] = {}
    for raw in argv[2:]:
        pattern = raw.decode("utf-8", "surrogateescape")
        if not any(ch in pattern for ch in "[*?"):
            if pattern not in matches and find(pattern) is not None:
                matches[pattern] = current_value(settings, pattern)
            continue
        for name in all_names():
            if name not in matches and glob_match(raw, name.encode(), nocase=True):
                matches[name] = current_value(settings, name)
    return {name.encode(): value.encode("utf-8", "surrogateescape") for name, value in matches.items()}


@command("CONFIG|SET", -4, _ADMIN, categories=_CATS, group="server", since="2.0.0")
def config_set(ctx: Ctx, argv: list[bytes]):
    """CONFIG SET parameter value [parameter value ...]"""
    if len(argv) % 2:
        raise ReplyError(errors.SYNTAX)
    pairs = [(argv[i].decode("utf-8", "surrogateescape"), argv[i + 1].decode("utf-8", "surrogateescape"))
             for i in range(2, len(argv), 2)]
    server = ctx.server
    names = _check_names(pairs, server.settings)
    old = server.settings
    new = _build_settings(old, names, pairs)
    for check in server.config_checks:  # refused before a socket is bound (a probe could connect)
        refusal = check(server, old, new)
        if refusal:
            raise ReplyError(_failed(names[0], refusal))
    failure = apply_listeners(server, old, new)
    if failure is not None:
        raise ReplyError(_failed(failure[0], failure[1]))
    server.settings = new
    for component in server.components:  # the parts in start order (durability first)
        refusal = component.config_changed(old, new)
        if refusal:
            server.settings = old
            apply_listeners(server, new, old)
            raise ReplyError(_failed(names[0], refusal))
    return OK


def _failed(name: str, message: str) -> str:
    return f"ERR CONFIG SET failed (possibly related to argument '{name}') - {message}"


def _check_names(pairs: list[tuple[str, str]], settings: Settings) -> list[str]:
    """Canonical names; the first unknown, immutable, protected or repeated one is refused (Redis's order).

    Pion's own start-up parameters (``config_table.PION_IMMUTABLE``, which Redis's tools do not know
    to skip) accept their current value as a no-op, so a ``CONFIG GET *`` / ``CONFIG SET`` round
    trip works; Redis's immutable parameters are refused whatever the value, as Redis does."""
    seen: set[str] = set()
    for name, value in pairs:
        canonical = find(name)
        if canonical is None:
            raise ReplyError(f"ERR Unknown option or number of arguments for CONFIG SET - '{name}'")
        param = table.PARAMS.get(canonical)
        if param is not None and param.flags & table.IMMUTABLE and not (
                canonical in table.PION_IMMUTABLE and _same_value(settings, canonical, param, value)):
            raise ReplyError(_failed(name, "can't set immutable config"))
        if param is not None and param.flags & table.PROTECTED:
            raise ReplyError(_failed(name, "can't set protected config"))
        if canonical in seen:
            raise ReplyError(_failed(name, "duplicate parameter"))
        seen.add(canonical)
    return [find(name) for name, _ in pairs]  # type: ignore[misc]


def _same_value(settings: Settings, canonical: str, param, value: str) -> bool:
    current = current_value(settings, canonical)
    try:
        return table.normalize(param, value, current) == current
    except ConfigError:
        return False


def _build_settings(old: Settings, names: list[str], pairs: list[tuple[str, str]]) -> Settings:
    """Check and normalize every value, then make the new Settings in one validated step."""
    changes: dict[str, Any] = {}
    extra = dict(old.extra)
    shown = ""
    for canonical, (name, raw) in zip(names, pairs, strict=True):
        param = table.PARAMS.get(canonical)
        shown = param.alias if param is not None and name.lower() == param.alias else canonical
        try:
            value = table.normalize(param, raw, current_value(old, canonical)) if param is not None else raw
            entry = PARAMETERS.get(canonical)
            if entry is not None and entry[0] in _FIELD_NAMES:
                changes[entry[0]] = entry[1](value)  # type: ignore[operator]
                continue
        except ConfigError as exc:
            raise ReplyError(_failed(shown, str(exc))) from None
        for key in (canonical, param.alias if param is not None else ""):
            extra.pop(key, None)
        extra[canonical] = value
    changes["extra"] = tuple(sorted(extra.items()))
    try:
        return old.with_changes(**changes)
    except (ConfigError, ValueError, TypeError) as exc:
        raise ReplyError(_failed(shown, str(exc))) from None


@command("CONFIG|RESETSTAT", 2, _ADMIN, categories=_CATS, group="server", since="2.0.0")
def config_resetstat(ctx: Ctx, argv: list[bytes]):
    """CONFIG RESETSTAT"""
    reset_stats(ctx.server)
    return OK


@command("CONFIG|REWRITE", 2, _ADMIN, categories=_CATS, group="server", since="2.8.0")
def config_rewrite(ctx: Ctx, argv: list[bytes]):
    """CONFIG REWRITE"""
    settings = ctx.server.settings
    if not settings.config_file:
        raise ReplyError("ERR The server is running without a config file")
    values = {name: current_value(settings, name) for name in _rewrite_names(settings)}
    defaults = {name: _default_value(name) for name in values}
    try:
        rewrite_config_file(settings.config_file, values, defaults, find)
    except OSError as exc:
        raise ReplyError(f"ERR Rewriting config file: {exc.strerror or exc}") from None
    return OK


def _rewrite_names(settings: Settings) -> list[str]:
    names = list(table.PARAMS) + [name for name in PARAMETERS if name not in table.PARAMS and name not in _INTERNAL]
    return names + [key for key, _ in settings.extra if find(key) is None]


def _default_value(name: str) -> str | None:
    try:
        return current_value(Settings(), name)
    except (ConfigError, ValueError):
        return None


@command("CONFIG|HELP", 2, "loading stale", categories="@slow", group="server", since="5.0.0")
def config_help(ctx: Ctx, argv: list[bytes]):
    """CONFIG HELP"""
    from pion.protocol.resp import Status

    return [Status(line) for line in HELP]
