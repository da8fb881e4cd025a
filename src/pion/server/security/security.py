"""Security as one component: the users (``auth.Users``), the tenants, TLS, and the checks that
refuse an unsafe start or an unsafe CONFIG SET.

``check_startup`` runs before anything is locked or opened; ``install`` builds the ``Security``
part the assembler hands to admission (``pion.server.admission``), which asks it
``refusal(client, spec, argv)``: the ACL (NOPERM), then a tenant's command limits and quota.
"""

from __future__ import annotations

import ipaddress
import os
from typing import TYPE_CHECKING, Any

from pion.protocol.errors import ReplyError
from pion.server.component import Component
from pion.server.errors import StartupError
from pion.server.net import tls
from pion.server.security import tenants
from pion.server.security.acl_check import is_unrestricted
from pion.server.security.acl_check import refusal as acl_refusal
from pion.server.security.auth import Users, users_of

if TYPE_CHECKING:
    from pion.config import Settings
    from pion.server.app import Server
    from pion.server.net.client import Client
    from pion.server.registry import CommandSpec


class Security:
    """The users and the tenants: what admission asks before a command runs."""

    def __init__(self, users: Users, tenant_engine: tenants.Tenants) -> None:
        self.users = users
        self.tenants = tenant_engine

    def refusal(self, client: Client, spec: CommandSpec, argv: list[bytes]) -> ReplyError | None:
        """NOPERM from the ACL, then a tenant's forbidden commands and its quota (-OOM)."""
        denied = acl_refusal(self.users, client, spec, argv)
        if denied is not None:
            return denied
        if client.tenant is not None:
            if tenants.tenant_denied(spec):
                return tenants.nopermission(client, spec)
            return self.tenants.quota_refusal(client, spec, argv)
        return None

    def admits_all(self, client: Client) -> bool:
        """Whether neither the ACL nor a tenant can refuse any command of this client now (the
        fast lane's question, ``pion.server.fastlane``). The ACL answer is kept on the client
        with the user object it was computed for: ACL SETUSER, ACL LOAD and ACL DELUSER put a
        new object in the table (``UserTable.staged`` works on a copy), so a changed user is a
        different object and the cached answer is not used for it."""
        if client.tenant is not None:
            return False
        user = self.users.table.users.get(client.user)
        verdict = client.acl_verdict
        if verdict is not None and verdict[0] is user:
            return verdict[1]
        admitted = user is None or is_unrestricted(user)
        client.acl_verdict = (user, admitted)
        return admitted


# -- refusing an unsafe start ----------------------------------------------------------------------


def is_loopback(host: str) -> bool:
    """True for loopback bind addresses; raises ValueError for one that does not parse."""
    bare = host.lstrip("-")
    if bare == "localhost":
        return True
    if bare in ("*", "::*"):
        return False
    return ipaddress.ip_address(bare).is_loopback


def check_bind(settings: Settings) -> str | None:
    """Why this bind is refused at start, or None: bad addresses, or exposure without a password."""
    exposed = []
    for host in settings.bind or ("127.0.0.1",):
        try:
            if not is_loopback(host):
                exposed.append(host)
        except ValueError:
            return f"bind: '{host}' is not a valid IPv4 or IPv6 address"
    listening = settings.port or settings.tls_port
    if exposed and listening and settings.protected_mode and not settings.requirepass:
        return (
            f"refusing to listen on {', '.join(exposed)} without a password: anyone who can reach it could "
            "read, change or delete all data. Set a password (--requirepass-file PATH, the PION_REQUIREPASS "
            "environment variable, or --requirepass), or bind to 127.0.0.1; on a network you trust "
            "completely, start with --protected-mode no."
        )
    return None


def dashboard_exposed(settings: Settings) -> bool:
    """The dashboard listens beyond loopback; raises StartupError for an address that does not parse."""
    try:
        return bool(settings.dashboard_port) and not is_loopback(settings.dashboard_bind)
    except ValueError:
        raise StartupError(f"dashboard-bind: '{settings.dashboard_bind}' is not a valid IPv4 or IPv6 address") from None


def dashboard_refusal(bind: str) -> str:
    return (f"refusing to serve the dashboard on {bind} without a password: anyone who can reach it could "
            "read what the cache holds. Set a password (--requirepass-file PATH, PION_REQUIREPASS, or an ACL "
            "user with one) and keep the default user from being open, or bind the dashboard to 127.0.0.1 "
            "(the default).")


def check_dashboard_bind(settings: Settings) -> str | None:
    """A dashboard beyond loopback with no password anywhere in the settings (no requirepass, no
    user line with one, no ACL file): refused before anything is locked. The users as loaded
    (an ACL file's, an open default user) are checked again when the dashboard is installed."""
    if not dashboard_exposed(settings) or settings.requirepass or settings.aclfile:
        return None
    if any(">" in line or "#" in line for line in settings.users):
        return None
    return dashboard_refusal(settings.dashboard_bind)


def check_startup(settings: Settings) -> list[Any]:
    """Refuse a start that is unsafe or misconfigured (before the data directory is locked);
    returns the tenant specs. Raises ``StartupError`` with what to do instead."""
    from pion.config import ConfigError

    refusal = check_bind(settings) or check_dashboard_bind(settings)
    if refusal is not None:
        raise StartupError(refusal)
    try:
        specs = tenants.load_specs(settings)
        if settings.tls_port:
            tls.make_context(settings)
    except (ConfigError, tls.TLSConfigError) as exc:
        raise StartupError(str(exc)) from None
    except OSError as exc:
        raise StartupError(f"cannot read {exc.filename or 'a file'}: {exc.strerror or exc}") from None
    return specs


# -- wiring ------------------------------------------------------------------------------------------


def install(server: Server, specs: list[Any]) -> Security:
    """Users, tenants, the ACL file and TLS reloads, onto a built server."""
    users = users_of(server)
    part = Security(users, tenants.install(server, specs))
    users.table.all_channels = _all_channels(server.settings)
    path = server.settings.aclfile
    if path and server.settings.users:
        raise StartupError(_USERS_AND_ACLFILE)
    if path:
        path = os.path.join(server.settings.dir, path)  # relative to dir, as Redis (it chdirs there)
        error = users.table.load_file(path)
        if error is not None:
            raise StartupError(f"Aborting startup because of ACL errors: {error}")
    declared: set[str] = set()
    for line in server.settings.users:
        _configure_user(users, line, declared)
    if server.settings.tls_port:
        server.parts.tls = tls.make_context(server.settings)
    server.add_component(SecurityPart(server))
    server.config_checks.append(_config_changed)  # before any listener is bound
    return part


class SecurityPart(Component):
    """CONFIG SET of the TLS files (the context is reloaded) and of acl-pubsub-default."""

    name = "security"

    def __init__(self, server: Server) -> None:
        self.server = server

    def config_changed(self, old: Settings, new: Settings) -> str | None:
        refusal = tls.config_changed(self.server, old, new)
        if refusal:
            return refusal
        return _pubsub_default_changed(self.server, old, new)


_USERS_AND_ACLFILE = ("Configuring Redis with users defined in redis.conf and at the same setting an ACL file path "
                      "is invalid. This setup is very likely to lead to configuration errors and security holes, "
                      "please define either an ACL file or declare users directly in your redis.conf, but not both.")


def _configure_user(users: Users, line: str, declared: set[str]) -> None:
    """A redis.conf ``user <name> <rules...>`` line: ACLLoadConfiguredUsers (the user is reset
    first, so ``user default ...`` replaces the default user's rules); a bad rule, or a second
    line for the same user, stops the start."""
    name, *rules = line.split(" ")
    if name in declared:
        raise StartupError(f"Error in user declaration '{name}': Duplicate user found. A user can only be defined "
                           "once in config files")
    declared.add(name)
    try:
        users.table.set_user(name, [b"reset", *(rule.encode() for rule in rules if rule)])
    except ValueError as exc:
        raise StartupError(f"Error in user declaration '{name}': {exc}") from None


def _all_channels(settings: Settings) -> bool:
    return settings.acl_pubsub_default.lower() == "allchannels"


def _pubsub_default_changed(server: Server, old: Settings, new: Settings) -> str | None:
    """CONFIG SET acl-pubsub-default: users made from now on (and ``reset``) follow it."""
    users_of(server).table.all_channels = _all_channels(new)
    return None


def _config_changed(server: Server, old: Settings, new: Settings) -> str | None:
    """CONFIG SET must not leave the server exposed: the same rules as at start."""
    if new.requirepass != old.requirepass and server.tenant_dbs and not new.requirepass:
        return "tenants need requirepass (the admin password); it cannot be removed while tenants exist"
    if (new.bind, new.requirepass, new.protected_mode) != (old.bind, old.requirepass, old.protected_mode):
        refused = check_bind(new)
        if refused is not None:
            return refused
    if new.requirepass != old.requirepass:
        users_of(server).set_default_password(new.requirepass)
    return None
