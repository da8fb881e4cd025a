"""``--dashboard-port``: the page's JSON over plain HTTP: logins against the server's own users,
the session cookie, tenants kept apart, the prefix table sorted and paged on the server, the
panels' data, refusals at start and bad requests answered without harm. The browser itself is
tests/server/test_dashboard_browser.py."""

from __future__ import annotations

import re
import socket
import time

import pytest
import redis
from tests.server.test_metrics import sample, scrape
from tests.support.clusters import PionThreadCluster
from tests.support.dashboard_data import hit, store_many, store_prefix
from tests.support.dashboard_http import Dash
from tests.support.servers import free_port, make_settings

from pion.server.errors import StartupError
from pion.server.run import make_server as make_server_now
from pion.server.security.auth import FAIL_DELAY, QUEUE_MAX
from pion.server.security.security import check_startup

PASSWORD = "admin-secret"


def dash_of(srv) -> Dash:
    return Dash(srv.settings.dashboard_port)


@pytest.fixture
def open_server(make_server):
    return make_server(dashboard_port=free_port())


@pytest.fixture
def locked(make_server):
    """A server with a password and two tenants."""
    return make_server(dashboard_port=free_port(), requirepass=PASSWORD,
                       tenants=("acme:acme-pass", "globex:globex-pass"))


def test_off_by_default(make_server):
    srv = make_server()
    assert srv.server.parts.dashboard is None
    assert all(c.name != "dashboard" for c in srv.server.components)
    with redis.Redis(port=srv.port, decode_responses=True) as r:
        assert r.config_get("dashboard-port") == {"dashboard-port": "0"}
        assert r.config_get("dashboard-bind") == {"dashboard-bind": "127.0.0.1"}
        with pytest.raises(redis.ResponseError, match="can't set immutable config"):
            r.config_set("dashboard-port", "9999")


def test_the_page_and_its_files_are_served_without_a_session(open_server):
    dash = dash_of(open_server)
    page = dash.get("/")
    assert page.status == 200 and page.headers["content-type"].startswith("text/html")
    assert b'<script src="/static/app.js"' in page.raw
    assert not re.search(rb'(src|href)="(https?:)?//', page.raw)  # nothing from another host (no CDN)
    assert "script-src 'self'" in page.headers["content-security-policy"]
    for name, kind in (("app.js", "text/javascript"), ("style.css", "text/css")):
        reply = dash.get(f"/static/{name}")
        assert reply.status == 200 and reply.headers["content-type"].startswith(kind)
    assert dash.get("/static/../part.py").status == 404
    assert dash.get("/nothing").status == 404


def test_an_open_loopback_server_opens_a_session_without_a_login(open_server):
    dash = dash_of(open_server)
    assert dash.get("/api/overview").status == 401  # no cookie yet
    session = dash.get("/api/session")
    assert session.status == 200 and session.body == {"user": "default", "tenant": None, "open": True}
    cookie = dash.set_cookies[-1]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/" in cookie
    assert len(dash.cookie) >= 40  # 256 random bits, url-safe
    other = dash_of(open_server)
    other.get("/api/session")
    assert other.cookie != dash.cookie
    assert dash.get("/api/overview").status == 200


def test_a_password_server_asks_for_a_login_and_refuses_a_wrong_one(locked):
    dash = dash_of(locked)
    assert dash.get("/api/session").status == 401  # no open session: a password is set
    assert dash.get("/api/overview").status == 401
    started = time.monotonic()
    wrong = dash.login("default", "guess")
    assert wrong.status == 401
    assert wrong.body["error"] == "WRONGPASS invalid username-password pair or user is disabled."
    assert time.monotonic() - started >= FAIL_DELAY  # AUTH's cost of a wrong guess
    assert dash.cookie is None
    assert dash.login("nobody", PASSWORD).status == 401
    failures = locked.call(lambda: locked.server.parts.acl.failures["127.0.0.1"][0])
    assert failures == 2  # the same per-address counters AUTH keeps
    logged = locked.call(lambda: [(e["username"], e["client-info"]) for e in locked.server.parts.acl.log.entries])
    assert logged == [("nobody", "dashboard addr=127.0.0.1"), ("default", "dashboard addr=127.0.0.1")]  # ACL LOG
    with socket.create_connection(("127.0.0.1", locked.port), timeout=10) as sock:  # AUTH sees them too
        sock.sendall(b"AUTH wrong\r\n")
        assert sock.recv(100).startswith(b"-WRONGPASS")
    assert locked.call(lambda: locked.server.parts.acl.failures["127.0.0.1"][0]) == 3
    right = dash.login("default", PASSWORD)
    assert right.status == 200 and right.body["user"] == "default" and right.body["tenant"] is None
    assert dash.get("/api/overview").status == 200
    assert PASSWORD.encode() not in right.raw and all(PASSWORD not in c for c in dash.set_cookies)


def test_a_login_is_json_posted_never_a_url_or_a_form(locked):
    dash = dash_of(locked)
    assert dash.get(f"/api/login?user=default&password={PASSWORD}").status == 405
    form = dash.request("POST", "/api/login", f"user=default&password={PASSWORD}".encode(),
                        content_type="application/x-www-form-urlencoded")
    assert form.status == 415 and dash.cookie is None
    assert dash.request("POST", "/api/login", b"{not json").status == 400
    assert dash.request("POST", "/api/login", [1, 2]).status == 400


def test_a_flood_of_guesses_is_refused_unchecked(locked):
    def crowd():
        entry = locked.server.parts.acl.failures.setdefault("127.0.0.1", [0.0, 0.0, 0.0])
        now = time.monotonic()
        entry[:] = [40.0, now, now + QUEUE_MAX + 5]

    locked.call(crowd)
    refused = dash_of(locked).login("default", PASSWORD)  # right, but not even checked
    assert refused.status == 429 and "too many failed AUTH attempts" in refused.body["error"]


def test_logout_and_a_changed_password_end_the_session(locked):
    dash = dash_of(locked)
    assert dash.login("default", PASSWORD).status == 200
    kept = dash.cookie
    assert dash.request("POST", "/api/logout").status == 200
    dash.cookie = kept
    assert dash.get("/api/overview").status == 401
    assert dash.login("default", PASSWORD).status == 200
    with redis.Redis(port=locked.port, password=PASSWORD) as r:
        r.config_set("requirepass", "another-one")
    assert dash.get("/api/overview").status == 401  # the password that logged in is no longer valid


def test_an_acl_user_logs_in_and_one_without_info_is_refused(make_server):
    srv = make_server(dashboard_port=free_port(), requirepass=PASSWORD)
    with redis.Redis(port=srv.port, password=PASSWORD) as r:
        r.execute_command("ACL", "SETUSER", "ops", "on", ">ops-pass", "+info", "+@read")
        r.execute_command("ACL", "SETUSER", "app", "on", ">app-pass", "+get")
    ops = dash_of(srv)
    assert ops.login("ops", "ops-pass").status == 200 and ops.get("/api/overview").status == 200
    app = dash_of(srv)
    refused = app.login("app", "app-pass")
    assert refused.status == 403 and "'info'" in refused.body["error"] and app.cookie is None
    with redis.Redis(port=srv.port, password=PASSWORD) as r:
        r.execute_command("ACL", "SETUSER", "ops", "off")
    assert ops.get("/api/overview").status == 401  # a disabled user is logged out


def test_a_tenant_sees_only_its_own(locked):
    with redis.Redis(port=locked.port, username="acme", password="acme-pass") as acme, \
            redis.Redis(port=locked.port, username="globex", password="globex-pass") as globex, \
            redis.Redis(port=locked.port, password=PASSWORD) as admin:
        store_prefix(acme, "acme-doc", 8)
        hit(acme, "acme-doc", 3)
        store_prefix(globex, "globex-doc", 8)
        hit(globex, "globex-doc")
        store_prefix(admin, "server-doc", 8)
    tenant = dash_of(locked)
    session = tenant.login("acme", "acme-pass")
    assert session.status == 200 and session.body["tenant"] == "acme"
    rows = tenant.get("/api/prefixes").body["rows"]
    assert [(r["space"], r["ns"], r["hits"]) for r in rows] == [("acme", "acme-doc", 3)]
    overview = tenant.get("/api/overview").body
    assert [s["space"] for s in overview["kv"]["spaces"]] == ["acme"]
    assert overview["kv"]["hits"] == 3 and overview["kv"]["prefixes"] == 1
    assert overview["memory"]["used_bytes"] > 0 and "rss_bytes" not in overview["memory"]
    assert all(p["hits"] + p["misses"] <= 3 for p in tenant.get("/api/history").body["points"])
    assert tenant.get("/api/replication").status == 403
    assert tenant.get("/api/slowlog").status == 403
    assert b"globex" not in b"".join(tenant.get(p).raw for p in ("/api/prefixes", "/api/overview", "/api/search"))
    admin_dash = dash_of(locked)
    assert admin_dash.login("default", PASSWORD).status == 200
    seen = {(r["space"], r["ns"]) for r in admin_dash.get("/api/prefixes?sort=ns").body["rows"]}
    assert seen == {("acme", "acme-doc"), ("globex", "globex-doc"), ("default", "server-doc")}


def test_the_prefix_table_is_sorted_and_paged_on_the_server(open_server):
    with redis.Redis(port=open_server.port) as r:
        store_many(r, 2500)  # more than one build chunk and more than one page
        store_prefix(r, "zz-hot", 16)
        hit(r, "zz-hot", 4)
        store_prefix(r, "aa-warm", 64)
        hit(r, "aa-warm", 2)
        r.execute_command("KV.PREFIX.PIN", "aa-warm")
    dash = dash_of(open_server)
    dash.get("/api/session")
    page = dash.get("/api/prefixes?sort=ns&order=asc&page=2&size=100").body
    assert page["total"] == 2502 and page["pages"] == 26 and page["page"] == 2
    assert [row["ns"] for row in page["rows"]] == [f"p{i:05d}" for i in range(99, 199)]  # aa-warm is first
    by_hits = dash.get("/api/prefixes?sort=hits").body  # desc by default
    assert [(r["ns"], r["hits"]) for r in by_hits["rows"][:2]] == [("zz-hot", 4), ("aa-warm", 2)]
    assert by_hits["rows"][0]["last_hit"] > time.time() - 120
    assert by_hits["rows"][2]["ns"] == "p00000"  # ties in namespace order
    tokens = dash.get("/api/prefixes?sort=tokens&order=desc&size=1").body["rows"][0]
    assert (tokens["ns"], tokens["tokens"], tokens["codec"], tokens["pinned"]) == ("aa-warm", 64, "fp16", True)
    assert tokens["bytes"] > 0
    last = dash.get("/api/prefixes?sort=ns&order=desc&page=26&size=100").body["rows"]
    assert [row["ns"] for row in last] == ["p00000", "aa-warm"]  # 2502 rows: 2 on the 26th page
    assert dash.get("/api/prefixes?page=99&size=100").body["rows"] == []
    for query, text in (("sort=color", "sort must be one of"), ("order=up", "order must be asc or desc"),
                        ("size=0", "size must be an integer in 1..500"), ("size=501", "size must be"),
                        ("page=-1", "page must be"), ("pages=2", "unknown parameter 'pages'")):
        reply = dash.get(f"/api/prefixes?{query}")
        assert reply.status == 400 and text in reply.body["error"], query


def test_the_panels_read_what_metrics_and_info_read(make_server):
    srv = make_server(dashboard_port=free_port(), metrics_port=free_port(), kv_maxmemory=1 << 30)
    with redis.Redis(port=srv.port) as r:
        store_prefix(r, "doc", 8, prefill_ms=250)
        hit(r, "doc", 2)
        assert r.execute_command("KV.PREFIX.LOOKUP", "absent") == b"MISS"
        r.execute_command("FT.CREATE", "idx", "ON", "HASH", "PREFIX", "1", "d:", "SCHEMA", "t", "TEXT",
                          "v", "VECTOR", "FLAT", "6", "TYPE", "FLOAT32", "DIM", "2", "DISTANCE_METRIC", "L2")
        for i in range(5):
            r.hset(f"d:{i}", mapping={"t": "hello", "v": bytes(8)})
        r.hset("d:text-only", mapping={"t": "no vector"})
        r.config_set("slowlog-log-slower-than", "0")
        r.set("slow-key", "v")
        r.config_set("slowlog-log-slower-than", "10000")
        info = r.info("memory")
    dash = dash_of(srv)
    dash.get("/api/session")
    overview = dash.get("/api/overview").body
    kv = overview["kv"]
    assert (kv["hits"], kv["misses"], kv["prefixes"], kv["budget_bytes"]) == (2, 1, 1, 1 << 30)
    assert kv["hit_rate"] == pytest.approx(2 / 3) and kv["prefill_saved_s"] == pytest.approx(0.5)
    assert kv["tokens_served"] == 16 and kv["stored_bytes"] > 0
    assert overview["memory"]["max_bytes"] == info["maxmemory"] and overview["memory"]["keys"] == 7
    families = scrape(srv)  # the metrics endpoint of the same server: the same numbers
    assert kv["stored_bytes"] == sample(families, "pion_kv_stored_bytes", "pion_kv_stored_bytes", tenant="default")
    assert kv["hits"] == sample(families, "pion_kv_prefix_hits", "pion_kv_prefix_hits_total", tenant="default")
    search = dash.get("/api/search").body
    assert search["indexes"] == [{"space": "default", "db": 0, "name": "idx", "docs": 6, "vectors": 5,
                                  "indexing": False, "percent_indexed": 1.0, "failures": 0,
                                  "memory_bytes": search["indexes"][0]["memory_bytes"]}]
    replication = dash.get("/api/replication").body
    assert replication["replication"]["role"] == "master" and replication["cluster"]["cluster_enabled"] == 0
    slow = dash.get("/api/slowlog").body
    assert any(e["command"] == "SET slow-key v" for e in slow["entries"])


def test_the_history_samples_hits_over_time(open_server):
    dashboard = open_server.server.parts.dashboard
    dashboard.history.interval = 0.05
    with redis.Redis(port=open_server.port) as r:
        store_prefix(r, "doc", 8)
        for _ in range(3):
            hit(r, "doc", 2)
            r.execute_command("KV.PREFIX.LOOKUP", "absent")
            time.sleep(0.3)  # the cron (hz 50) samples every 0.05 s
    dash = dash_of(open_server)
    dash.get("/api/session")
    points = dash.get("/api/history").body["points"]
    assert sum(p["hits"] for p in points) == 6 and sum(p["misses"] for p in points) == 3
    assert all(p["hit_rate"] is None or 0 <= p["hit_rate"] <= 1 for p in points)
    assert points[-1]["saved_total_s"] == pytest.approx(6 * 8 * 555 / 1e6)


def test_a_non_loopback_bind_needs_a_password(make_server, tmp_path):
    with pytest.raises(StartupError, match="refusing to serve the dashboard on 0.0.0.0 without a password"):
        check_startup(make_settings(tmp_path, dashboard_port=free_port(), dashboard_bind="0.0.0.0"))
    with pytest.raises(StartupError, match="dashboard-bind: 'nowhere' is not a valid"):
        check_startup(make_settings(tmp_path, dashboard_port=free_port(), dashboard_bind="nowhere"))
    (tmp_path / "open").mkdir()
    open_default = make_settings(tmp_path / "open", dashboard_port=free_port(), dashboard_bind="0.0.0.0",
                                 users=("default on nopass ~* &* +@all", "ops on >pw ~* +@all"))
    check_startup(open_default)  # a user line has a password: the loaded users are checked at install
    with pytest.raises(StartupError, match="without a password"):  # where the default user is found open
        make_server_now(open_default)
    srv = make_server(dashboard_port=free_port(), dashboard_bind="0.0.0.0", requirepass=PASSWORD)
    dash = dash_of(srv)
    assert dash.get("/api/session").status == 401  # never an open session off loopback
    assert dash.login("default", PASSWORD).status == 200
    with redis.Redis(port=srv.port, password=PASSWORD) as r:
        with pytest.raises(redis.ResponseError, match="the dashboard listens on 0.0.0.0 and needs a password"):
            r.config_set("requirepass", "")
        r.execute_command("ACL", "SETUSER", "nopass-user", "on", "nopass", "+@all")
    refused = dash_of(srv).login("nopass-user", "anything")
    assert refused.status == 403 and "no password" in refused.body["error"]


def test_a_foreign_host_name_is_refused_on_loopback(open_server):
    dash = dash_of(open_server)
    dash.sent_host = "attacker.example:80"  # a page that rebound its name to 127.0.0.1
    assert dash.get("/api/session").status == 421 and dash.cookie is None
    dash.sent_host = f"localhost:{open_server.settings.dashboard_port}"
    assert dash.get("/api/session").status == 200


def test_bad_requests_are_answered_and_change_nothing(open_server):
    port = open_server.settings.dashboard_port

    def raw(data: bytes) -> bytes:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(data)
            chunks = []
            while chunk := sock.recv(65536):
                chunks.append(chunk)
            return b"".join(chunks)

    assert raw(b"garbage\r\n\r\n").startswith(b"HTTP/1.1 400")
    assert raw(b"GET / HTTP/1.1\r\nX: " + b"a" * 10000 + b"\r\n\r\n").startswith(b"HTTP/1.1 431")
    assert raw(b"POST /api/login HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 99999\r\n\r\n").startswith(b"HTTP/1.1 413")
    assert raw(b"POST /api/login HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: x\r\n\r\n").startswith(b"HTTP/1.1 400")
    assert raw(b"DELETE /api/overview HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").startswith(b"HTTP/1.1 405")
    dash = dash_of(open_server)
    assert dash.get("/api/session").status == 200
    with redis.Redis(port=open_server.port) as r:
        assert r.ping()


def test_a_cluster_node_shows_cluster_info(tmp_path):
    web = free_port()
    cluster = PionThreadCluster(tmp_path, 1, dashboard_port=str(web))
    try:
        dash = Dash(web)
        dash.get("/api/session")
        state = dash.get("/api/replication").body["cluster"]
        assert (state["cluster_enabled"], state["cluster_state"], state["cluster_known_nodes"]) == (1, "ok", 1)
        assert state["cluster_slots_assigned"] == 16384  # CLUSTER INFO's own fields
    finally:
        cluster.stop()
