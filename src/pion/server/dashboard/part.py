"""The dashboard as a server component: its listener, its routes, its cron sample.

The listener is an ``asyncio`` server on the event loop, as the metrics endpoint's is: every
answer reads server state, which only the loop may touch, and each is small (one page of
prefixes, a few cards, the last hour of samples). What could be long is cut into slices so it
never holds the loop's critical path: the prefix table is read and sorted a slice at a time with
yields between, and reused while fresh (``pion.server.dashboard.prefixes``); a failed login
waits with ``asyncio.sleep``, never holding the loop. One request per connection; the page's files are read from the package at start.

Routes: ``GET /`` (the page), ``GET /static/<file>``, ``GET /api/session`` (who is logged in;
on an open loopback server it opens a session as ``default``), ``POST /api/login``
(``{"user", "password"}`` as JSON), ``POST /api/logout``, and the JSON the page polls:
``/api/overview``, ``/api/prefixes?sort=&order=&page=&size=``, ``/api/history``,
``/api/search``, and for users of the main keyspace ``/api/replication`` and ``/api/slowlog``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from importlib import resources
from typing import TYPE_CHECKING

from pion.server.component import Component
from pion.server.dashboard import readers
from pion.server.dashboard.history import History
from pion.server.dashboard.http import BadRequest, Request, Response, error, json_response, read_request
from pion.server.dashboard.prefixes import PrefixTable, Query, QueryError
from pion.server.dashboard.readers import Viewer
from pion.server.dashboard.sessions import COOKIE, Session, Sessions
from pion.server.errors import StartupError
from pion.server.security.security import dashboard_exposed, dashboard_refusal

if TYPE_CHECKING:
    from pion.config import Settings
    from pion.server.app import Server

log = logging.getLogger("pion.dashboard")

STATIC = {"index.html": "text/html; charset=utf-8", "app.js": "text/javascript; charset=utf-8",
          "style.css": "text/css; charset=utf-8"}
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]")


def load_static() -> dict[str, bytes]:
    folder = resources.files("pion.server.dashboard") / "static"
    return {name: (folder / name).read_bytes() for name in STATIC}


class Dashboard(Component):
    """``--dashboard-port``: the page, its JSON and its sessions."""

    name = "dashboard"

    def __init__(self, server: Server, sessions: Sessions, host: str, port: int) -> None:
        self.server = server
        self.sessions = sessions
        self.host, self.port = host, port
        self.static = load_static()
        self.history = History(lambda: readers.kv_counters(server))
        self.table = PrefixTable(lambda: server.parts.kvcache)
        self.requests = 0
        self._listener: asyncio.Server | None = None
        self._handlers: set[asyncio.Task] = set()

    # -- moments ------------------------------------------------------------------------------

    async def start(self) -> None:
        try:
            self._listener = await asyncio.start_server(self._serve, self.host, self.port, backlog=64,
                                                        limit=8192)
        except OSError as exc:
            raise StartupError(f"cannot listen for the dashboard on {self.host}:{self.port}: "
                               f"{exc.strerror or exc}") from None
        self.history.tick()
        log.info("dashboard at http://%s:%d/", self.host, self.bound_port)

    async def stop(self) -> None:
        if self._listener is not None:
            self._listener.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._listener.wait_closed(), 1.0)
            self._listener = None
        for task in list(self._handlers):
            task.cancel()

    def cron(self) -> None:
        self.history.tick()
        self.table.prune()  # a closed page's snapshot (tens of MB at 100,000 prefixes) is not kept

    def config_changed(self, old: Settings, new: Settings) -> str | None:
        if self.sessions.exposed and not new.requirepass and old.requirepass and not _other_password(self.server):
            return (f"the dashboard listens on {self.host} and needs a password: requirepass cannot be removed "
                    "while no other user has one")
        return None

    @property
    def bound_port(self) -> int:
        if self._listener is None or not self._listener.sockets:
            return 0
        return int(self._listener.sockets[0].getsockname()[1])

    # -- serving ------------------------------------------------------------------------------

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._handlers.add(task)
        peer = writer.get_extra_info("peername")
        host = str(peer[0]) if isinstance(peer, tuple) and peer else "?"
        try:
            try:
                request = await read_request(reader, host)
                response = await self.answer(request)
            except BadRequest as exc:
                response = error(exc.status, str(exc))
            self.requests += 1
            writer.write(response.encode())
            await writer.drain()
        except (ConnectionError, asyncio.CancelledError):
            pass
        except Exception:  # a bug in a reader must not take the server down; the page shows 500
            log.exception("dashboard request failed")
            with contextlib.suppress(Exception):
                writer.write(error("500 Internal Server Error", "internal error (see the server log)").encode())
                await writer.drain()
        finally:
            writer.close()
            if task is not None:
                self._handlers.discard(task)

    async def answer(self, request: Request) -> Response:
        if not self._host_allowed(request):
            return error("421 Misdirected Request", "this dashboard answers only to its loopback address")
        path, method = request.path, request.method
        if path in ("/", "/index.html"):
            return self._file("index.html", method)
        if path.startswith("/static/"):
            return self._file(path.removeprefix("/static/"), method)
        if path == "/api/login":
            return await self._login(request) if method == "POST" else error("405 Method Not Allowed", "POST")
        if path == "/api/logout":
            if method != "POST":
                return error("405 Method Not Allowed", "POST")
            self.sessions.close(request.cookie(COOKIE))
            return json_response({"ok": True}, headers=[("Set-Cookie", self.sessions.cleared_cookie())])
        if not path.startswith("/api/"):
            return error("404 Not Found", "not found")
        if method != "GET":
            return error("405 Method Not Allowed", "GET")
        session = self.sessions.current(request.cookie(COOKIE))
        headers: list[tuple[str, str]] = []
        if session is None and path == "/api/session":
            session = self.sessions.open_session()
            if session is not None:
                headers.append(("Set-Cookie", self.sessions.cookie(session)))
        if session is None:
            return error("401 Unauthorized", "log in first")
        viewer = Viewer(session.user, session.tenant)
        if path == "/api/session":
            return json_response(self._session_info(session), headers=headers)
        return await self._api(path, request, viewer)

    async def _api(self, path: str, request: Request, viewer: Viewer) -> Response:
        server = self.server
        if path == "/api/overview":
            return json_response(readers.overview(server, viewer))
        if path == "/api/prefixes":
            try:
                query = Query.parse(request.query)
            except QueryError as exc:
                return error("400 Bad Request", str(exc))
            return json_response(await self.table.page(viewer, query))
        if path == "/api/history":
            return json_response({"interval_s": self.history.interval,
                                  "points": self.history.series(viewer.sees)})
        if path == "/api/search":
            return json_response(readers.search(server, viewer))
        if path in ("/api/replication", "/api/slowlog"):
            if viewer.tenant is not None:
                return error("403 Forbidden", "a tenant sees its own data only")
            return json_response(readers.replication(server) if path == "/api/replication" else readers.slowlog(server))
        return error("404 Not Found", "not found")

    async def _login(self, request: Request) -> Response:
        body = request.json()
        if not isinstance(body, dict) or not isinstance(body.get("password", ""), str) \
                or not isinstance(body.get("user", ""), str):
            return error("400 Bad Request", 'send {"user": "...", "password": "..."}')
        result = self.sessions.login(request.peer, body.get("user", ""), body.get("password", ""))
        if result.wait:
            await asyncio.sleep(result.wait)  # AUTH's cost of a guess; the loop serves everyone else
        if result.session is None:
            return error(result.status, result.error)
        self.sessions.close(request.cookie(COOKIE))
        return json_response(self._session_info(result.session),
                             headers=[("Set-Cookie", self.sessions.cookie(result.session))])

    def _session_info(self, session: Session) -> dict[str, object]:
        return {"user": session.user, "tenant": session.tenant,
                "open": not self.sessions.exposed and self.sessions.users.open_to_all}

    def _file(self, name: str, method: str) -> Response:
        if method != "GET":
            return error("405 Method Not Allowed", "GET")
        body = self.static.get(name)
        if body is None:
            return error("404 Not Found", "not found")
        return Response("200 OK", body, STATIC[name])

    def _host_allowed(self, request: Request) -> bool:
        """On loopback, only requests addressed to loopback: a page elsewhere that rebinds its
        name to 127.0.0.1 (DNS rebinding) sends its own name as Host and is refused."""
        if self.sessions.exposed:
            return True
        host = request.headers.get("host", "")
        name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
        return name in LOOPBACK_HOSTS or name.startswith("127.")


def _other_password(server: Server) -> bool:
    users = server.parts.acl
    return users is not None and any(u.enabled and not u.nopass and u.passwords and u.name != "default"
                                     for u in users.users.values())


def install(server: Server) -> Dashboard | None:
    """With ``--dashboard-port``: the page, opened after every other part started."""
    from pion.server.security.auth import users_of

    settings = server.settings
    if not settings.dashboard_port:
        return None
    exposed = dashboard_exposed(settings)
    users = users_of(server)
    if exposed and (users.open_to_all or not any(u.enabled and not u.nopass and u.passwords
                                                 for u in users.users.values())):
        raise StartupError(dashboard_refusal(settings.dashboard_bind))  # the users as loaded (ACL file, lines)
    if exposed:
        log.warning("dashboard on %s over plain HTTP: passwords cross the network in the clear; put it behind "
                    "TLS (a reverse proxy or an SSH tunnel)", settings.dashboard_bind)
    dashboard = Dashboard(server, Sessions(users, server.table, exposed), settings.dashboard_bind,
                          settings.dashboard_port)
    server.parts.dashboard = dashboard
    server.add_component(dashboard)
    return dashboard
