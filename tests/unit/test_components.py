"""The component protocol: the order parts start, stop and answer in, and where INFO puts them."""

from __future__ import annotations

import asyncio

import pytest

from pion.config import Settings
from pion.protocol.errors import ReplyError
from pion.server.app import Server
from pion.server.assembly import make_server
from pion.server.component import Component


class Recording(Component):
    def __init__(self, name: str, log: list[str], refuse: str | None = None) -> None:
        self.name, self.log, self.refuse = name, log, refuse

    async def start(self) -> None:
        self.log.append(f"start {self.name}")

    async def stop(self) -> None:
        self.log.append(f"stop {self.name}")

    def config_changed(self, old, new) -> str | None:
        self.log.append(f"config {self.name}")
        return self.refuse


def test_parts_start_in_order_and_stop_in_reverse(tmp_path):
    log: list[str] = []
    server = Server(Settings(port=0, dir=str(tmp_path)))
    for name in ("a", "b", "c"):
        server.add_component(Recording(name, log))

    async def run() -> None:
        await server.start()
        await server.stop()

    asyncio.run(run())
    assert log == ["start a", "start b", "start c", "stop c", "stop b", "stop a"]


def test_config_changed_runs_in_order_and_stops_at_a_refusal(tmp_path):
    from pion.server.commands.control.config import config_set
    from pion.server.context import Ctx
    from pion.server.net.client import Client

    log: list[str] = []
    server = Server(Settings(port=0, dir=str(tmp_path)))
    for name, refuse in (("a", None), ("b", "not now"), ("c", None)):
        server.add_component(Recording(name, log, refuse))
    ctx = Ctx(Client(1, server), server)
    with pytest.raises(ReplyError, match="- not now$"):
        config_set(ctx, [b"CONFIG", b"SET", b"hz", b"50"])
    assert log == ["config a", "config b"]
    assert server.settings.hz != 50  # rolled back


def test_info_sections_take_a_default_place_or_go_before_pion(tmp_path):
    server = Server(Settings(port=0, dir=str(tmp_path)))

    class Pion(Component):
        info_name = "pion"

    class Engine(Component):
        info_name = "engine"

    class Late(Component):
        info_name = "late"
        info_before = None

    class Persistence(Component):
        info_name = "persistence"

        def info_section(self):
            return {"mine": 1}

    class Extends(Component):
        info_extends = ("server", "absent")

        def info_extra(self, section):
            return {"extra_field": section}

    defaults = list(server.info_sections)
    for part in (Pion(), Engine(), Late(), Persistence(), Extends()):
        server.add_component(part)
    assert list(server.info_sections) == [*defaults, "engine", "pion", "late"]
    assert server.info_sections["persistence"](server) == {"mine": 1}
    assert server.info_sections["server"](server)["extra_field"] == "server"
    assert "absent" not in server.info_sections


def test_the_assembler_puts_durability_first_and_the_final_save_before_the_engines_stop(tmp_path):
    server = make_server(Settings(port=0, dir=str(tmp_path), moe_cache=str(tmp_path)))
    names = [part.name for part in server.components]
    try:
        assert names[0] == "durability"
        assert names[-1] == "final-save"  # no --metrics-port: nothing after it
        assert names.index("moe") < names.index("final-save") and names.index("search") < names.index("final-save")
    finally:
        asyncio.run(server.stop())  # closes the log and unlocks the directory
