"""Authentication: the default user's password (``requirepass``)."""

from __future__ import annotations

import hmac
from typing import TYPE_CHECKING

from pion.protocol import errors
from pion.protocol.errors import ReplyError

if TYPE_CHECKING:
    from pion.server.app import Server
    from pion.server.client import Client


def authenticate(server: Server, client: Client, user: bytes, password: bytes) -> None:
    """Authenticate ``client`` or raise Redis's error; compares in constant time."""
    required = server.settings.requirepass
    if not required:
        if user == b"default":
            raise ReplyError(
                "ERR AUTH <password> called without any password configured for the default user. "
                "Are you sure your configuration is correct?"
            )
        raise ReplyError(errors.WRONGPASS)
    if user == b"default" and hmac.compare_digest(password, required.encode()):
        client.authenticated = True
        client.user = "default"
        return
    raise ReplyError(errors.WRONGPASS)
