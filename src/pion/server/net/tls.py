"""TLS: a second listener (``--tls-port``) speaking the same protocol through Python's ``ssl``,
configured with redis-server's flags: ``--tls-cert-file``, ``--tls-key-file``
(``--tls-key-file-pass``), ``--tls-ca-cert-file`` / ``--tls-ca-cert-dir``, ``--tls-auth-clients
yes|no|optional`` (client certificates; ``yes`` by default, as Redis), ``--tls-protocols``
("TLSv1.2 TLSv1.3"), ``--tls-ciphers`` and ``--tls-ciphersuites`` (accepted only as OpenSSL's
defaults: Python cannot set TLS 1.3 suites).

The context is built (and every file read) before the server listens, so a missing or bad file
refuses the start with the reason. CONFIG SET of the certificate, key or CA files loads them into
the same context: new connections use them, open ones are not disturbed (certificate rotation).
"""

from __future__ import annotations

import asyncio
import ssl
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pion.config import Settings
    from pion.server.app import Server

VERIFY = {"yes": ssl.CERT_REQUIRED, "optional": ssl.CERT_OPTIONAL, "no": ssl.CERT_NONE}
PROTOCOLS = {"tlsv1.2": ssl.TLSVersion.TLSv1_2, "tlsv1.3": ssl.TLSVersion.TLSv1_3}
_FILES = ("tls_cert_file", "tls_key_file", "tls_key_file_pass", "tls_ca_cert_file", "tls_ca_cert_dir",
          "tls_auth_clients", "tls_protocols", "tls_ciphers")


class TLSConfigError(ValueError):
    """TLS settings that cannot be used; the message says which and why."""


def make_context(settings: Settings) -> ssl.SSLContext:
    """A server context from the settings (raises TLSConfigError)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.options |= ssl.OP_NO_COMPRESSION
    _set_protocols(context, settings.tls_protocols)
    if settings.tls_ciphers:
        try:
            context.set_ciphers(settings.tls_ciphers)
        except ssl.SSLError as exc:
            raise TLSConfigError(f"tls-ciphers: {exc}") from None
    if settings.tls_ciphersuites:
        raise TLSConfigError("tls-ciphersuites cannot be set with Python's ssl; leave it empty (OpenSSL's "
                             "TLS 1.3 defaults are used) or restrict protocols with --tls-protocols")
    load_files(context, settings)
    return context


def load_files(context: ssl.SSLContext, settings: Settings) -> None:
    """Load the certificate, key and CA files and the client-certificate policy into ``context``."""
    if not settings.tls_cert_file or not settings.tls_key_file:
        raise TLSConfigError("--tls-port needs --tls-cert-file and --tls-key-file")
    mode = VERIFY.get(settings.tls_auth_clients)
    if mode is None:
        raise TLSConfigError("tls-auth-clients must be yes, no or optional")
    if mode != ssl.CERT_NONE and not (settings.tls_ca_cert_file or settings.tls_ca_cert_dir):
        raise TLSConfigError("tls-auth-clients yes|optional needs --tls-ca-cert-file or --tls-ca-cert-dir "
                             "(the CA that signs client certificates); or use --tls-auth-clients no")
    try:
        context.load_cert_chain(settings.tls_cert_file, settings.tls_key_file, settings.tls_key_file_pass or None)
    except (OSError, ssl.SSLError) as exc:
        raise TLSConfigError(f"cannot load --tls-cert-file/--tls-key-file: {_reason(exc)}") from None
    if settings.tls_ca_cert_file or settings.tls_ca_cert_dir:
        try:
            context.load_verify_locations(settings.tls_ca_cert_file or None, settings.tls_ca_cert_dir or None)
        except (OSError, ssl.SSLError) as exc:
            raise TLSConfigError(f"cannot load the TLS CA certificates: {_reason(exc)}") from None
    context.verify_mode = mode


def _set_protocols(context: ssl.SSLContext, text: str) -> None:
    if not text.strip():
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        return
    versions = []
    for word in text.lower().split():
        if word not in PROTOCOLS:
            raise TLSConfigError(f"tls-protocols: '{word}' is not supported (use TLSv1.2 and/or TLSv1.3)")
        versions.append(PROTOCOLS[word])
    context.minimum_version, context.maximum_version = min(versions), max(versions)


def _reason(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.filename:
        return f"{exc.strerror or exc} ({exc.filename})"
    return str(exc)


async def listen_tls(server: Server, hosts: list[str]) -> asyncio.AbstractServer:
    """Open the TLS listener with the context built at start (``server.parts.tls``)."""
    from pion.server.net.connection import Connection

    context = server.parts.tls
    if context is None:
        context = server.parts.tls = make_context(server.settings)
    loop = asyncio.get_running_loop()
    hosts = [{"*": "0.0.0.0", "::*": "::"}.get(host.lstrip("-"), host.lstrip("-")) for host in hosts]
    return await loop.create_server(lambda: Connection(server), hosts, server.settings.tls_port, ssl=context,
                                    reuse_address=True, backlog=511, ssl_handshake_timeout=10.0)


def config_changed(server: Server, old: Settings, new: Settings) -> str | None:
    """CONFIG SET of TLS files: load them into the live context (refused, and rolled back, if bad)."""
    context = server.parts.tls
    if context is None or all(getattr(old, name) == getattr(new, name) for name in _FILES):
        return None
    try:
        if new.tls_ciphers != old.tls_ciphers:
            context.set_ciphers(new.tls_ciphers or "DEFAULT")
        if new.tls_protocols != old.tls_protocols:
            _set_protocols(context, new.tls_protocols)
        load_files(context, new)
    except (TLSConfigError, ssl.SSLError) as exc:
        try:  # back to what worked (CONFIG SET restores the old settings too)
            context.set_ciphers(old.tls_ciphers or "DEFAULT")
            _set_protocols(context, old.tls_protocols)
            load_files(context, old)
        except (TLSConfigError, ssl.SSLError):
            pass
        return str(exc)
    return None
