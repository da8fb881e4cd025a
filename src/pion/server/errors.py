"""The server's own exceptions, a leaf every part may import (it imports nothing of Pion).

``StartupError`` is what a component raises while the server is being assembled or started (a
bad setting, a locked or corrupt data directory, an unreadable ACL file); ``pion-server`` prints
its message and exits 1. Client mistakes are ``pion.protocol.errors.ReplyError``, not these.
"""

from __future__ import annotations


class StartupError(Exception):
    """The server refuses to start; the message says why and what to do instead."""
