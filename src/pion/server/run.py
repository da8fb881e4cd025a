"""Build a Server from Settings (``pion.server.assembly``) and run it on uvloop until SIGTERM/SIGINT."""

from __future__ import annotations

import asyncio
import logging

from pion.config import Settings
from pion.server.assembly import make_server
from pion.server.errors import StartupError

__all__ = ["StartupError", "make_server", "run_server"]

log = logging.getLogger("pion.server")


def run_server(settings: Settings) -> int:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a hard dependency on Linux
        uvloop = None
    try:
        server = make_server(settings)
        if uvloop is not None:
            uvloop.run(server.serve_forever())
        else:
            asyncio.run(server.serve_forever())
    except StartupError as exc:
        log.error("%s", exc)
        return 1
    except OSError as exc:
        log.error("could not start: %s", exc)
        return 1
    return 0
