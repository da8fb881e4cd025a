"""ACL users and the user table: passwords, flags, selectors, ACL SETUSER's staging, the ACL file.

Pure like ``acl_rules`` (no server import). A ``User`` is on/off, nopass or a list of SHA-256
password hashes, a root selector and any number of ``(...)`` selectors; a command is allowed if
any selector allows it and all its keys and channels (Redis's ACLCheckAllUserCommandPerm).
``UserTable.set_user`` applies every rule to a copy and swaps it in only when all of them apply,
so a bad ACL SETUSER changes nothing. ``load_file``/``save_file`` are ACL LOAD and ACL SAVE: a
file with one ``user <name> <rules>`` line per user, validated whole before anything changes and
written to a temporary file that is then renamed over the old one.
"""

from __future__ import annotations

import errno as errnos
import hashlib
import hmac
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from pion.server.security.acl_rules import ALL, READ, WRITE, Catalog, CommandRef, RuleError, Selector, has_spaces

#: ACLCheckAllUserCommandPerm's results, ordered as Redis picks "the most relevant" refusal
OK, DENIED_CMD, DENIED_KEY, DENIED_CHANNEL = 0, 1, 2, 3
_HEX64 = re.compile(rb"[0-9a-f]{64}\Z")
#: keys a command touches: argv -> [(position, READ|WRITE flags)]; channels: [(position, is_pattern)]
KeyFinder = Callable[[CommandRef, list[bytes]], list[tuple[int, int]]]
ChannelFinder = Callable[[CommandRef, list[bytes]], list[tuple[int, bool]]]


def hash_password(password: bytes) -> bytes:
    """The hex SHA-256 Redis stores and shows (ACL GETUSER passwords, ``#<hash>`` rules)."""
    return hashlib.sha256(password).hexdigest().encode()


@dataclass(slots=True)
class User:
    name: str
    enabled: bool = False
    nopass: bool = False
    #: "sanitize-payload" / "skip-sanitize-payload" once set (RESTORE payload checks), else ""
    sanitize: str = ""
    passwords: list[bytes] = field(default_factory=list)  # hex SHA-256 digests
    selectors: list[Selector] = field(default_factory=lambda: [Selector(root=True)])
    #: the tenant whose keyspace this user sees (``--tenant``), None for users of the main keyspace
    tenant: str | None = None
    quota: int = 0

    @property
    def root(self) -> Selector:
        return self.selectors[0]

    def copy(self) -> User:
        return User(self.name, self.enabled, self.nopass, self.sanitize, list(self.passwords),
                    [s.copy() for s in self.selectors], self.tenant, self.quota)

    def accepts(self, password: bytes) -> bool:
        """ACLCheckUserCredentials: enabled, and nopass or a matching hash (constant time)."""
        if not self.enabled:
            return False
        if self.nopass:
            return True
        hashed = hash_password(password)
        return any(hmac.compare_digest(hashed, known) for known in self.passwords)

    # -- the rules that are about the user, not a selector -------------------------------------

    def apply(self, op: bytes, catalog: Catalog, all_channels: bool = False) -> None:
        """Redis's ACLSetUser; raises RuleError. ``all_channels``: ``acl-pubsub-default`` is
        allchannels, so a new selector and ``reset`` start with every channel (ACLCreateSelector)."""
        if not op:
            return
        low = op.lower()
        if low in (b"on", b"off"):
            self.enabled = low == b"on"
        elif low in (b"skip-sanitize-payload", b"sanitize-payload"):
            self.sanitize = low.decode()
        elif low == b"nopass":
            self.nopass, self.passwords = True, []
        elif low == b"resetpass":
            self.nopass, self.passwords = False, []
        elif op[:1] in (b">", b"#"):
            hashed = hash_password(op[1:]) if op[:1] == b">" else _checked_hash(op[1:])
            if hashed not in self.passwords:
                self.passwords.append(hashed)
            self.nopass = False
        elif op[:1] in (b"<", b"!"):
            hashed = hash_password(op[1:]) if op[:1] == b"<" else _checked_hash(op[1:])
            if hashed not in self.passwords:
                raise RuleError(errnos.ENODEV)
            self.passwords.remove(hashed)
        elif op[:1] == b"(" and op[-1:] == b")":
            selector = Selector(allchannels=all_channels)
            for part in op[1:-1].split():
                selector.apply(part, catalog)
            self.selectors.append(selector)
        elif low == b"clearselectors":
            del self.selectors[1:]
        elif low == b"reset":
            self.nopass, self.passwords = False, []
            self.enabled = False
            self.sanitize = "sanitize-payload"
            del self.selectors[1:]
            for rule in (b"resetkeys", b"resetchannels", *((b"allchannels",) if all_channels else ()), b"-@all"):
                self.root.apply(rule, catalog)
        else:
            self.root.apply(op, catalog)

    def flags(self) -> list[str]:
        """ACL GETUSER flags / ACL LIST's leading words, in Redis's order."""
        return [name for name, on in (("on", self.enabled), ("off", not self.enabled), ("nopass", self.nopass),
                                      ("skip-sanitize-payload", self.sanitize == "skip-sanitize-payload"),
                                      ("sanitize-payload", self.sanitize == "sanitize-payload")) if on]

    def describe(self) -> str:
        """ACLDescribeUser: flags, ``#hash`` passwords, the root selector, then ``(...)`` ones."""
        parts = [*self.flags(), *("#" + h.decode() for h in self.passwords), self.root.describe()]
        return " ".join(parts + [f"({s.describe()})" for s in self.selectors[1:]])

    # -- checks --------------------------------------------------------------------------------

    def check(self, ref: CommandRef, argv: list[bytes], keys: KeyFinder, channels: ChannelFinder) -> tuple[int, int]:
        """ACLCheckAllUserCommandPerm: (OK, 0) or (refusal, argv position of the key or channel)."""
        relevant, last = DENIED_CMD, 0
        found_keys: list[tuple[int, int]] | None = None
        for selector in self.selectors:
            result, pos = DENIED_CMD, 0
            if selector.can_run(ref, argv):
                result = OK
                if not selector.allkeys:
                    if found_keys is None:
                        found_keys = keys(ref, argv)
                    for pos, flags in found_keys:
                        if not selector.can_access_key(bytes(argv[pos]), flags):
                            result = DENIED_KEY
                            break
                if result == OK and not selector.allchannels:
                    for pos, is_pattern in channels(ref, argv):
                        if not selector.can_use_channel(bytes(argv[pos]), is_pattern):
                            result = DENIED_CHANNEL
                            break
            if result == OK:
                return OK, 0
            if result > relevant or (result == relevant and pos > last):
                relevant, last = result, pos
        return relevant, last

    def can_use_channel(self, channel: bytes, is_pattern: bool) -> bool:
        return any(s.can_use_channel(channel, is_pattern) for s in self.selectors)

    def has_unrestricted_key_access(self, ref: CommandRef, argv: list[bytes], keys: KeyFinder,
                                    channels: ChannelFinder, flags: int) -> bool:
        """ACLUserCheckCmdWithUnrestrictedKeyAccess: one selector both admits this call and has
        every key for ``flags`` (what SORT's BY and GET patterns need)."""
        return any(selector.has_all_keys(flags) and
                   User(self.name, selectors=[selector]).check(ref, argv, keys, channels)[0] == OK
                   for selector in self.selectors)


def _checked_hash(text: bytes) -> bytes:
    if not _HEX64.match(text):
        raise RuleError(errnos.EBADMSG)
    return text


def default_user(catalog: Catalog) -> User:
    """Redis's ACLCreateDefaultUser: on, nopass, every key, channel and command."""
    user = User("default")
    for rule in (b"+@all", b"~*", b"&*", b"on", b"nopass"):
        user.apply(rule, catalog)
    return user


def merge_selectors(args: list[bytes]) -> list[bytes]:
    """ACLMergeSelectorArguments: ``(`` ... ``)`` spread over several arguments become one.
    Raises ValueError naming the argument that opens an unmatched parenthesis."""
    merged: list[bytes] = []
    opened: list[bytes] | None = None
    for arg in args:
        if opened is None and arg[:1] == b"(" and arg[-1:] != b")":
            opened = [arg]
            continue
        if opened is not None:
            opened.append(arg)
            if arg[-1:] == b")":
                merged.append(b" ".join(opened))
                opened = None
            continue
        merged.append(arg)
    if opened is not None:
        raise ValueError(opened[0].decode("utf-8", "replace"))
    return merged


class UserTable:
    """Every user by name (``default`` always there); what ACL SETUSER/DELUSER/LOAD change."""

    def __init__(self, catalog: Catalog) -> None:
        self.catalog = catalog
        self.users: dict[str, User] = {"default": default_user(catalog)}
        #: ``acl-pubsub-default allchannels``: new users, new selectors and ``reset`` get ``&*``
        self.all_channels = False

    def new_user(self, name: str) -> User:
        """ACLCreateUser: off, no passwords, no commands or keys; channels as acl-pubsub-default says."""
        user = User(name)
        user.root.allchannels = self.all_channels
        return user

    @property
    def default(self) -> User:
        return self.users["default"]

    def get(self, name: str) -> User | None:
        return self.users.get(name)

    def staged(self, user: User | None, name: str, args: list[bytes]) -> User:
        """The user after ``args`` (ACL SETUSER's rules), on a copy; raises ValueError with
        Redis's message when any rule fails (nothing is changed then)."""
        try:
            merged = merge_selectors(args)
        except ValueError as exc:
            raise ValueError(f"Unmatched parenthesis in acl selector starting at '{exc}'.") from None
        staged = user.copy() if user is not None else self.new_user(name)
        for op in merged:
            try:
                staged.apply(op, self.catalog, self.all_channels)
            except RuleError as exc:
                raise ValueError(f"Error in ACL SETUSER modifier '{op.decode('utf-8', 'replace')}': {exc}") from None
        return staged

    def set_user(self, name: str, args: list[bytes]) -> User:
        """ACL SETUSER: create or change ``name``; returns the new user object."""
        if has_spaces(name.encode()):
            raise ValueError("Usernames can't contain spaces or null characters")
        user = self.staged(self.users.get(name), name, args)
        self.users[name] = user
        return user

    # -- the ACL file ----------------------------------------------------------------------------

    def parse_file(self, text: str, filename: str, keep: Callable[[str], User | None]) -> dict[str, User]:
        """ACLLoadFromFile's validation: the users the file describes, or ValueError with every
        problem found (then nothing may change). ``keep(name)`` gives the user object a line
        re-describes when it must stay bound to something (a tenant), else None."""
        problems: list[str] = []
        users: dict[str, User] = {}
        for number, raw in enumerate(text.split("\n"), 1):
            line = raw.strip(" \t\r\n")
            if not line:
                continue
            words = [w for w in line.encode("utf-8", "surrogateescape").split(b" ") if w]
            if not words:
                continue
            if words[0] != b"user" or len(words) < 2:
                problems.append(f"{filename}:{number} should start with user keyword followed by the username. ")
                continue
            name = words[1].decode("utf-8", "replace")
            if name in users:
                problems.append(f"WARNING: Duplicate user '{name}' found on line {number}. ")
                continue
            base = keep(name)
            user = base.copy() if base is not None else self.new_user(name)
            if base is not None:
                user.apply(b"reset", self.catalog, self.all_channels)
            problems.extend(self._apply_line(user, words[2:], filename, number))
            users[name] = user
        if problems:
            raise ValueError("".join(problems) +
                             "WARNING: ACL errors detected, no change to the previously active ACL rules was performed")
        users.setdefault("default", default_user(self.catalog))
        return users

    def _apply_line(self, user: User, args: list[bytes], filename: str, number: int) -> list[str]:
        try:
            merged = merge_selectors(args)
        except ValueError:
            return [f"{filename}:{number}: Unmatched parenthesis in selector definition."]
        problems: list[str] = []
        syntax_error = False
        for op in merged:
            try:
                user.apply(op.strip(b"\t\r\n"), self.catalog, self.all_channels)
            except RuleError as exc:
                if exc.code == errnos.ENOENT:
                    problems.append(f"{filename}:{number}: Error in applying operation "
                                    f"'{op.decode('utf-8', 'replace')}': {exc}. ")
                elif not syntax_error:
                    problems.append(f"{filename}:{number}: {exc}. ")
                    syntax_error = True
        return problems

    def load_file(self, path: str) -> str | None:
        """ACL LOAD: swap in the file's users (tenants stay bound to their keyspaces, and those
        the file does not name stay as they are); returns the error text, or None."""
        try:
            with open(path, encoding="utf-8", errors="surrogateescape") as handle:
                text = handle.read()
        except OSError as exc:
            return f"Error loading ACLs, opening file '{path}': {exc.strerror or exc}"
        tenants = {name: user for name, user in self.users.items() if user.tenant is not None}
        try:
            loaded = self.parse_file(text, path, tenants.get)
        except ValueError as exc:
            return str(exc)
        for name, user in tenants.items():
            loaded.setdefault(name, user)
        self.users.clear()
        self.users.update(loaded)
        return None

    def file_text(self) -> str:
        """ACL SAVE's content: one ``user`` line per user, as ACL LIST shows them."""
        return "".join(f"user {name} {user.describe()}\n" for name, user in sorted(self.users.items()))


def save_file(path: str, text: str) -> None:
    """Write the ACL file through a temporary file renamed over it (fsynced: survives a crash)."""
    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        with open(tmp, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


__all__ = ["ALL", "READ", "WRITE", "DENIED_CMD", "DENIED_KEY", "DENIED_CHANNEL", "OK", "User", "UserTable",
           "default_user", "hash_password", "merge_selectors", "save_file"]
