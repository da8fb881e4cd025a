"""The component protocol: what the assembler (``pion.server.assembly``) asks of a part.

A component is given the narrow collaborators it uses when it is built, and the server calls it
at four moments, all optional (the base class does nothing):

- ``start()``: after recovery, before the listeners open, in the order the assembler added them;
- ``stop()``: after the listeners closed, in reverse order, before durability's final flush;
- ``cron()``: ``hz`` times a second on the loop (skipped while a script runs past its threshold);
- ``metrics()``: ``prometheus_client`` metric families for a scrape (``pion.server.metrics``).

The metrics endpoint is the first part built this way; the older parts still register hook
functions on the server (docs/architecture.md, "What is left").
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


class Component:
    """Base of the server's parts; override what the part needs."""

    #: a short name (logs, INFO, the assembler's order)
    name = "component"

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        return None

    def cron(self) -> None:
        return None

    def metrics(self) -> Iterable[Any]:
        return ()
