"""Who is looking: the dashboard's logins, checked against the server's own users, and the
sessions they open.

A login names an ACL user and its password (``pion.server.security.auth``: the default user of
``requirepass``, a ``--tenant``, an ACL file's user). A wrong one costs what a wrong AUTH costs,
from the same per-address counters, so a guesser gains nothing by switching from AUTH to the
page, and goes to ACL LOG as a failed AUTH does (client-info ``dashboard addr=...``). A right one opens a session: a random 256-bit id in an HTTP-only, ``SameSite=Strict``
cookie (the password is never stored, sent back or put in a URL). Every request checks the
session again against the users as they are now: a user disabled or deleted, or whose password
changed, is logged out. A user of the main keyspace must be allowed to run ``INFO`` (the
dashboard shows what INFO shows); a tenant sees its own data only.

On a non-loopback address nothing is open: a user without a password is refused even when the
default user needs none (the assembler refuses such a start; this covers an ``ACL SETUSER
default nopass`` later).
"""

from __future__ import annotations

import hmac
import logging
import secrets
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pion.protocol import errors
from pion.server.security.acl_check import check
from pion.server.security.acl_users import OK, User, hash_password
from pion.server.security.auth import FAIL_DELAY_MAX, QUEUE_FULL, QUEUE_MAX, Users, printable

if TYPE_CHECKING:
    from pion.server.registry import CommandTable

log = logging.getLogger("pion.dashboard")

COOKIE = "pion_dashboard"
#: a session unused this long is gone
IDLE_SECONDS = 3600.0
MAX_SESSIONS = 1000


@dataclass(slots=True)
class Session:
    id: str
    user: str
    tenant: str | None
    #: the hash of the password that logged in ("" for a user without one): a changed password ends it
    password_hash: bytes
    last_seen: float


@dataclass(slots=True)
class LoginResult:
    session: Session | None
    #: seconds the answer must wait (a failed guess, or a right one queued behind guesses)
    wait: float
    error: str = ""
    status: str = "200 OK"


class Sessions:
    def __init__(self, users: Users, table: CommandTable, exposed: bool) -> None:
        self.users = users
        self.table = table
        #: listening beyond loopback: every session needs a password
        self.exposed = exposed
        self.sessions: OrderedDict[str, Session] = OrderedDict()
        self.failed_logins = 0
        self.logins = 0

    # -- logging in ---------------------------------------------------------------------------

    def login(self, host: str, name: str, password: str) -> LoginResult:
        """Check ``name``/``password`` as AUTH would, with AUTH's cost of a wrong guess."""
        wait = self.users.queued_host(host)
        if wait > QUEUE_MAX:  # not even checked: the address has guessed enough for now
            return LoginResult(None, FAIL_DELAY_MAX, QUEUE_FULL.format(wait - QUEUE_MAX + 1), "429 Too Many Requests")
        user = self.users.get(name or "default")
        secret = password.encode()
        if user is not None and user.accepts(secret):
            refusal = self.refusal(user)
            if refusal is not None:
                return LoginResult(None, wait, refusal, "403 Forbidden")
            self.logins += 1
            return LoginResult(self.open(user, secret), wait)
        self.failed_logins += 1
        count, delay = self.users.note_host_failure(host)
        self.users.log.record("auth", "toplevel", "AUTH", printable(name or "default"), f"dashboard addr={host}")
        if count <= 10 or count & (count - 1) == 0:
            log.warning("dashboard login failed for user '%s' from %s (%d recent failures from this address; "
                        "its answer is delayed %.3f s)", printable(name or "default"), host, count, delay)
        return LoginResult(None, delay, errors.WRONGPASS, "401 Unauthorized")

    def open_session(self) -> Session | None:
        """A session without a login, when the server asks none (loopback, default user open)."""
        if self.exposed or not self.users.open_to_all:
            return None
        return self.open(self.users.default, b"")

    def refusal(self, user: User) -> str | None:
        """Why this (correctly authenticated) user may not use the dashboard, or None."""
        if self.exposed and user.nopass:
            return "this user has no password: the dashboard on a non-loopback address needs one"
        if user.tenant is not None:
            return None
        spec = self.table.get(b"info")
        if spec is None or check(self.users, user, spec, [b"INFO"])[0] != OK:
            return "this user has no permissions to run the 'info' command, which the dashboard shows"
        return None

    def open(self, user: User, secret: bytes) -> Session:
        session = Session(secrets.token_urlsafe(32), user.name, user.tenant,
                          b"" if user.nopass else hash_password(secret), time.monotonic())
        self.sessions[session.id] = session
        while len(self.sessions) > MAX_SESSIONS:
            self.sessions.popitem(last=False)
        return session

    def close(self, session_id: str | None) -> None:
        if session_id:
            self.sessions.pop(session_id, None)

    # -- every request ------------------------------------------------------------------------

    def current(self, session_id: str | None) -> Session | None:
        """The live session of this cookie, checked against the users as they are now."""
        if not session_id:
            return None
        session = self.sessions.get(session_id)
        now = time.monotonic()
        if session is None:
            return None
        user = self.users.get(session.user)
        if now - session.last_seen > IDLE_SECONDS or user is None or not self._still_valid(session, user):
            del self.sessions[session_id]
            return None
        session.last_seen = now
        self.sessions.move_to_end(session_id)
        return session

    def _still_valid(self, session: Session, user: User) -> bool:
        if not user.enabled or user.tenant != session.tenant or self.refusal(user) is not None:
            return False
        if user.nopass:
            return True
        known = session.password_hash
        return bool(known) and any(hmac.compare_digest(known, hashed) for hashed in user.passwords)

    def cookie(self, session: Session) -> str:
        return f"{COOKIE}={session.id}; Path=/; HttpOnly; SameSite=Strict"

    @staticmethod
    def cleared_cookie() -> str:
        return f"{COOKIE}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0"
