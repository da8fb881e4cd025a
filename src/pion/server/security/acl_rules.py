"""The ACL rule language of Redis 7 for one selector: which commands, keys and channels it allows.

Pure: it knows the commands only through a ``Catalog`` (names, subcommands, categories) built
from the command table, so it imports nothing else of the server and is unit-tested alone. A
selector keeps the set of allowed full command names (``config|get``), the "future commands"
bit that only ``+@all`` sets, the deprecated first-argument grants (``+select|0``), its key
patterns with their R/W flags and its channel patterns. Its command rules are kept as written,
later rules replacing earlier ones for the same name (Redis 7.2's ``command_rules``), so ACL LIST
shows ``-@all +@set +@hash -@geo +get`` and not a recomputed approximation.
"""

from __future__ import annotations

import errno as errnos
from dataclasses import dataclass, field

from pion.storage.glob import glob_match

READ = 1
WRITE = 2
ALL = READ | WRITE

#: Redis's categories, in ACL CAT's order; a catalog may add its own (``pion``)
REDIS_CATEGORIES = (
    "keyspace", "read", "write", "set", "sortedset", "list", "hash", "string", "bitmap", "hyperloglog",
    "geo", "stream", "pubsub", "admin", "fast", "slow", "blocking", "dangerous", "connection",
    "transaction", "scripting",
)


class RuleError(ValueError):
    """A rule that does not apply; ``code`` is Redis's errno for it (message: ``MESSAGES``)."""

    def __init__(self, code: int) -> None:
        super().__init__(MESSAGES.get(code, "Wrong format"))
        self.code = code


MESSAGES = {
    errnos.ENOENT: "Unknown command or category name in ACL",
    errnos.EINVAL: "Syntax error",
    errnos.EEXIST: "Adding a pattern after the * pattern (or the 'allkeys' flag) is not valid and does not have "
                   "any effect. Try 'resetkeys' to start with an empty list of patterns",
    errnos.EISDIR: "Adding a pattern after the * pattern (or the 'allchannels' flag) is not valid and does not "
                   "have any effect. Try 'resetchannels' to start with an empty list of channels",
    errnos.ENODEV: "The password you are trying to remove from the user does not exist",
    errnos.EBADMSG: "The password hash must be exactly 64 characters and contain only lowercase hexadecimal "
                    "characters",
    errnos.EALREADY: "Duplicate user found. A user can only be defined once in config files",
    errnos.ECHILD: "Allowing first-arg of a subcommand is not supported",
}


@dataclass(frozen=True, slots=True)
class CommandRef:
    """What the rules need to know of one command or subcommand."""

    name: str  # full name, lower case: "get", "config|get"
    parent: str | None = None
    subcommands: tuple[str, ...] = ()
    categories: frozenset[str] = frozenset()  # without the '@'
    no_auth: bool = False


class Catalog:
    """The commands a server has, by full name, and the categories they fall in."""

    def __init__(self, refs: list[CommandRef]) -> None:
        self.refs = {ref.name: ref for ref in refs}
        extra = sorted({cat for ref in refs for cat in ref.categories} - set(REDIS_CATEGORIES))
        self.categories = (*REDIS_CATEGORIES, *extra)
        self.by_category = {cat: [ref for ref in refs if cat in ref.categories] for cat in self.categories}
        self.names = frozenset(self.refs)

    def lookup(self, name: str) -> CommandRef | None:
        return self.refs.get(name.lower())


def has_spaces(text: bytes) -> bool:
    """Redis's ACLStringHasSpaces: whitespace or NUL in a name or pattern."""
    return any(byte in b" \t\n\r\x0b\x0c\x00" for byte in text)


@dataclass(slots=True)
class Selector:
    """One set of permissions (a user's root selector or one of its ``(...)`` selectors)."""

    root: bool = False
    allowed: set[str] = field(default_factory=set)
    future: bool = False  # the reserved bit set only by +@all: also allows commands added later
    allcommands: bool = False  # every bit set and none cleared since (skips the name check)
    firstargs: dict[str, list[str]] = field(default_factory=dict)
    rules: list[str] = field(default_factory=list)
    allkeys: bool = False
    keys: list[list] = field(default_factory=list)  # [pattern bytes, READ|WRITE flags]
    allchannels: bool = False
    channels: list[bytes] = field(default_factory=list)

    def copy(self) -> Selector:
        return Selector(self.root, set(self.allowed), self.future, self.allcommands,
                        {k: list(v) for k, v in self.firstargs.items()}, list(self.rules), self.allkeys,
                        [list(k) for k in self.keys], self.allchannels, list(self.channels))

    # -- applying one rule ----------------------------------------------------------------------

    def apply(self, op: bytes, catalog: Catalog) -> None:
        """Redis's ACLSetSelector; raises RuleError."""
        low = op.lower()
        if low in (b"allkeys", b"~*"):
            self.allkeys, self.keys = True, []
        elif low == b"resetkeys":
            self.allkeys, self.keys = False, []
        elif low in (b"allchannels", b"&*"):
            self.allchannels, self.channels = True, []
        elif low == b"resetchannels":
            self.allchannels, self.channels = False, []
        elif low in (b"allcommands", b"+@all"):
            self.allowed = set(catalog.names)
            self.future = self.allcommands = True
            self.rules, self.firstargs = [], {}
        elif low in (b"nocommands", b"-@all"):
            self.allowed = set()
            self.future = self.allcommands = False
            self.rules, self.firstargs = [], {}
        elif op[:1] in (b"~", b"%"):
            self._add_key_pattern(op)
        elif op[:1] == b"&":
            if self.allchannels:
                raise RuleError(errnos.EISDIR)
            if has_spaces(op[1:]):
                raise RuleError(errnos.EINVAL)
            if op[1:] not in self.channels:
                self.channels.append(op[1:])
        elif op[:2] in (b"+@", b"-@"):
            self._set_category(op[2:].decode("utf-8", "replace").lower(), op[:1] == b"+", catalog)
        elif op[:1] == b"+":
            self._allow(op[1:].decode("utf-8", "replace"), catalog)
        elif op[:1] == b"-":
            ref = catalog.lookup(op[1:].decode("utf-8", "replace"))
            if ref is None:
                raise RuleError(errnos.ENOENT)
            self._change(ref, False, catalog)
            self._update_rules(ref.name, False)
        else:
            raise RuleError(errnos.EINVAL)

    def _add_key_pattern(self, op: bytes) -> None:
        if self.allkeys:
            raise RuleError(errnos.EEXIST)
        flags, offset = ALL, 1
        if op[:1] == b"%":
            flags = 0
            while offset < len(op):
                ch = op[offset:offset + 1].upper()
                offset += 1
                if ch == b"R" and not flags & READ:
                    flags |= READ
                elif ch == b"W" and not flags & WRITE:
                    flags |= WRITE
                elif ch == b"~":
                    break
                else:
                    raise RuleError(errnos.EINVAL)
        pattern = op[offset:]
        if has_spaces(pattern):
            raise RuleError(errnos.EINVAL)
        for entry in self.keys:
            if entry[0] == pattern:
                entry[1] |= flags
                break
        else:
            self.keys.append([pattern, flags])

    def _allow(self, name: str, catalog: Catalog) -> None:
        if "|" not in name:
            ref = catalog.lookup(name)
            if ref is None:
                raise RuleError(errnos.ENOENT)
            self._change(ref, True, catalog)
            self._update_rules(ref.name, True)
            return
        base, _, first = name.rpartition("|")
        ref = catalog.lookup(base)
        if ref is None:
            raise RuleError(errnos.ENOENT)
        if ref.parent is not None:
            raise RuleError(errnos.ECHILD)
        if not first:
            raise RuleError(errnos.EINVAL)
        if ref.subcommands:
            sub = catalog.lookup(name)
            if sub is None:
                raise RuleError(errnos.ENOENT)
            self._change(sub, True, catalog)
        else:
            grants = self.firstargs.setdefault(ref.name, [])
            if first.lower() not in (g.lower() for g in grants):
                grants.append(first)
        self._update_rules(name.lower(), True)

    def _set_category(self, category: str, allow: bool, catalog: Catalog) -> None:
        refs = catalog.by_category.get(category)
        if refs is None:
            raise RuleError(errnos.ENOENT)
        self._update_rules("@" + category, allow)
        for ref in refs:
            self._change(ref, allow, catalog)

    def _change(self, ref: CommandRef, allow: bool, catalog: Catalog) -> None:
        """Redis's ACLChangeSelectorPerm: a container takes its subcommands along."""
        for name in (ref.name, *ref.subcommands):
            if allow:
                self.allowed.add(name)
            else:
                self.allowed.discard(name)
                self.allcommands = False
        self.firstargs.pop(ref.name, None)

    def _update_rules(self, rule: str, allow: bool) -> None:
        """Redis 7.2's ACLUpdateCommandRules: drop earlier rules for the same name (and its
        subcommands), then append this one."""
        rule = rule.lower()
        self.rules = [r for r in self.rules if not (r[1:] == rule or r[1:].startswith(rule + "|"))]
        self.rules.append(("+" if allow else "-") + rule)

    # -- describing ---------------------------------------------------------------------------

    def command_rules(self) -> str:
        return " ".join(["+@all" if self.future else "-@all", *self.rules])

    def key_rules(self) -> list[str]:
        if self.allkeys:
            return ["~*"]
        return [{ALL: "~", READ: "%R~", WRITE: "%W~"}[flags] + pattern.decode("utf-8", "replace")
                for pattern, flags in self.keys]

    def channel_rules(self) -> list[str]:
        if self.allchannels:
            return ["&*"]
        return ["&" + pattern.decode("utf-8", "replace") for pattern in self.channels]

    def describe(self) -> str:
        """ACL LIST's text for this selector: keys, channels, command rules."""
        parts = self.key_rules()
        parts += self.channel_rules() if self.allchannels else ["resetchannels", *self.channel_rules()]
        return " ".join([*parts, self.command_rules()])

    # -- checking -------------------------------------------------------------------------------

    def can_run(self, ref: CommandRef, argv: list[bytes]) -> bool:
        """The command part of ACLSelectorCheckCmd (first-arg grants included)."""
        if self.allcommands or ref.no_auth or ref.name in self.allowed:
            return True
        grants = self.firstargs.get(ref.name if ref.parent is None else ref.parent)
        if not grants:
            return False
        index = 2 if ref.parent is not None else 1
        if len(argv) <= index:
            return False
        wanted = argv[index].decode("utf-8", "replace").lower()
        return any(grant.lower() == wanted for grant in grants)

    def can_access_key(self, key: bytes, flags: int) -> bool:
        """ACLSelectorCheckKey: a pattern with at least the needed R/W flags matches the key."""
        if self.allkeys:
            return True
        return any(have & flags == flags and glob_match(pattern, key) for pattern, have in self.keys)

    def has_all_keys(self, flags: int) -> bool:
        """ACLSelectorHasUnrestrictedKeyAccess: ``~*`` (or ``%R~*`` for reads ...)."""
        return self.allkeys or any(have & flags == flags and pattern == b"*" for pattern, have in self.keys)

    def can_use_channel(self, channel: bytes, is_pattern: bool) -> bool:
        """ACLCheckChannelAgainstList: PSUBSCRIBE patterns match literally, channels as globs."""
        if self.allchannels:
            return True
        if is_pattern:
            return channel in self.channels
        return any(glob_match(pattern, channel) for pattern in self.channels)
