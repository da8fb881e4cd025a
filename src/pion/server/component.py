"""The component protocol: what the assembler (``pion.server.assembly``) asks of a part.

A component is given the narrow collaborators it uses when it is built, and the server calls it
at these moments, all optional (the base class does nothing):

- ``start()``: at ``Server.start``, before the listeners open, in the order the parts were added
  (durability first: its recovery fills the keyspace before anything else starts);
- ``stop()``: after the listeners closed, in reverse order (durability's final save is a part of
  its own, added just before the metrics endpoint, so it runs before any engine tears its state
  down; durability itself, added first, closes the log and releases the lock last);
- ``cron()``: ``hz`` times a second on the loop (skipped while a script runs past its threshold);
- ``config_changed(old, new)``: after CONFIG SET swapped the settings, in order; an error text
  refuses the change (the settings and listeners are rolled back, the parts before it keep theirs);
- ``resetstat()``: CONFIG RESETSTAT, after the server's own counters;
- INFO: ``info_name`` names the section ``info_section()`` answers: it replaces a default
  section of that name where it stands, or goes before ``info_before`` (Pion's own section,
  kept last; ``None``: at the end); ``info_extends`` names other sections ``info_extra(section)``
  adds fields to (cluster mode in ``# Server``, full-sync counts in ``# Stats``);
- ``metrics()``: ``prometheus_client`` metric families for a scrape (``pion.server.metrics``).

Snapshot extensions are not a moment here: a part that keeps state outside the keyspace hands
``Persistence.snapshot_extensions`` a ``SnapshotExtension`` when it is installed, which needs no
call from the server.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pion.config import Settings


class Component:
    """Base of the server's parts; override what the part needs."""

    #: a short name (logs, the assembler's order)
    name = "component"
    #: the INFO section ``info_section()`` answers, or None
    info_name: str | None = None
    #: a new section goes before this one (None: at the end)
    info_before: str | None = "pion"
    #: other sections ``info_extra(section)`` adds fields to
    info_extends: tuple[str, ...] = ()

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        return None

    def cron(self) -> None:
        return None

    def config_changed(self, old: Settings, new: Settings) -> str | None:
        return None

    def resetstat(self) -> None:
        return None

    def info_section(self) -> dict[str, Any]:
        return {}

    def info_extra(self, section: str) -> dict[str, Any]:
        return {}

    def metrics(self) -> Iterable[Any]:
        return ()
