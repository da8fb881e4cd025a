"""ACL users as Redis 7 has them: SETUSER's rule language, selectors, enforcement with Redis 7.0's
-NOPERM texts, ACL LOG, DRYRUN, DELUSER, SAVE/LOAD and restarts. The first tests reproduce what
redis-py's own ACL tests check; the last ones run the same rules against redis-server."""

from __future__ import annotations

import re

import pytest
import redis

HASH = "5e884898da28047151d0e56f8dc6292773603d0d6aabbdd62a11ef721d1542d8"  # sha256("password")


def as_user(srv, name, password="pw", protocol=2) -> redis.Redis:
    return redis.Redis(port=srv.port, username=name, password=password, protocol=protocol, socket_timeout=10,
                       decode_responses=True)


@pytest.fixture
def admin(server):
    c = redis.Redis(port=server.port, decode_responses=True, socket_timeout=10)
    yield c
    c.close()


# -- what redis-py's test_commands.py checks ---------------------------------------------------------


def test_setuser_getuser_like_redis_py(admin):
    name = "redis-py-user"
    assert admin.acl_setuser(name, enabled=False, reset=True)
    acl = admin.acl_getuser(name)
    assert acl["categories"] == ["-@all"] and acl["commands"] == [] and acl["keys"] == []
    assert acl["passwords"] == [] and "off" in acl["flags"] and acl["enabled"] is False
    assert admin.acl_setuser(name, enabled=True, reset=True, nopass=True)
    assert {"on", "nopass"} <= set(admin.acl_getuser(name)["flags"])
    assert admin.acl_setuser(name, enabled=True, reset=True, passwords=["+pass1", "+pass2"],
                             categories=["+set", "+@hash", "-@geo"], commands=["+get", "+mget", "-hset"],
                             keys=["cache:*", "objects:*"])
    acl = admin.acl_getuser(name)
    assert set(acl["categories"]) == {"+@hash", "+@set", "-@all", "-@geo"}
    assert set(acl["commands"]) == {"+get", "+mget", "-hset"}
    assert set(acl["keys"]) == {"~cache:*", "~objects:*"} and len(acl["passwords"]) == 2
    assert admin.acl_setuser(name, enabled=True, passwords=["-pass2"])
    assert len(admin.acl_getuser(name)["passwords"]) == 1
    assert admin.acl_setuser(name, enabled=True, reset=True, hashed_passwords=["+" + HASH])
    assert admin.acl_getuser(name)["passwords"] == [HASH]
    assert admin.acl_setuser(name, enabled=True, hashed_passwords=["-" + HASH])
    assert admin.acl_getuser(name)["passwords"] == []


@pytest.mark.parametrize("protocol", [2, 3])
def test_selectors_in_getuser(server, protocol):
    c = redis.Redis(port=server.port, protocol=protocol, decode_responses=True)
    assert c.acl_setuser("u", enabled=True, reset=True, passwords=["+pass1"], categories=["+set", "+@hash", "-geo"],
                         commands=["+get"], keys=["cache:*"], channels=["message:*"], selectors=[("+set", "%W~app*")])
    acl = c.acl_getuser("u")
    assert set(acl["channels"]) == {"&message:*"}
    selectors = acl["selectors"]
    if protocol == 2:
        assert selectors == [["commands", "-@all +set", "keys", "%W~app*", "channels", ""]]
    else:
        assert selectors == [{"commands": "-@all +set", "keys": "%W~app*", "channels": ""}]
    c.close()


def test_dryrun_deluser_list_users(admin):
    admin.acl_setuser("redis-py-user", keys=["*"], commands=["+set"])
    assert admin.acl_dryrun("redis-py-user", "set", "key", "value") == "OK"
    assert "user has no permissions to run the" in admin.acl_dryrun("redis-py-user", "get", "key")
    start = len(admin.acl_list())
    for i in range(5):
        admin.acl_setuser(f"bogus_{i}", enabled=False, reset=True)
    assert len(admin.acl_list()) == start + 5 and "bogus_3" in admin.acl_users()
    assert admin.acl_deluser(*[f"bogus_{i}" for i in range(5)]) == 5
    assert admin.acl_getuser("bogus_0") is None and admin.acl_deluser("bogus_0") == 0
    assert admin.acl_genpass(555) and len(admin.acl_genpass(555)) == 139


def test_acl_log_like_redis_py(server, admin):
    admin.acl_setuser("logged", enabled=True, reset=True, commands=["+get", "+set", "+select"], keys=["cache:*"],
                      nopass=True)
    admin.acl_log_reset()
    user = redis.Redis(port=server.port, username="logged", password="x")
    assert user.set("cache:0", 1) and user.get("cache:0") == b"1"
    with pytest.raises(redis.exceptions.NoPermissionError):
        user.get("violated_cache:0")
    with pytest.raises(redis.exceptions.NoPermissionError):
        user.hset("cache:0", "hkey", "hval")
    entries = admin.acl_log()
    assert len(entries) == 3 and len(admin.acl_log(count=1)) == 1
    assert entries[0]["reason"] == "command" and entries[0]["object"] == "hset"
    assert entries[1]["reason"] == "key" and entries[1]["object"] == "violated_cache:0"
    assert entries[2]["object"] == "client|setinfo"  # the handshake's CLIENT SETINFO (+get +set +select only)
    user.close()


# -- enforcement ---------------------------------------------------------------------------------------


def test_nopermission_texts(server, admin):
    admin.execute_command("ACL", "SETUSER", "ro", "on", ">pw", "~app:*", "&news", "+@read", "+publish", "+subscribe")
    c = as_user(server, "ro")
    with pytest.raises(redis.exceptions.NoPermissionError, match="^this user has no permissions to run the 'set' command$"):
        c.set("app:1", "x")
    with pytest.raises(redis.exceptions.NoPermissionError, match="^this user has no permissions to access one of the keys used as arguments$"):
        c.get("other")
    with pytest.raises(redis.exceptions.NoPermissionError, match="^this user has no permissions to access one of the channels used as arguments$"):
        c.publish("sports", "x")
    assert c.publish("news", "x") == 0 and c.get("app:1") is None
    with pytest.raises(redis.exceptions.NoPermissionError, match="channel"):
        c.execute_command("SUBSCRIBE", "sports")
    c.close()


def test_read_and_write_key_patterns(server, admin):
    admin.execute_command("ACL", "SETUSER", "rw", "on", ">pw", "+@all", "%R~src:*", "%W~dst:*")
    c = as_user(server, "rw")
    admin.set("src:1", "v")
    assert c.get("src:1") == "v" and c.set("dst:1", "w")
    assert c.copy("src:1", "dst:2") is True  # source read, destination written
    with pytest.raises(redis.exceptions.NoPermissionError):
        c.get("dst:1")
    with pytest.raises(redis.exceptions.NoPermissionError):
        c.set("src:1", "x")
    with pytest.raises(redis.exceptions.NoPermissionError):
        c.copy("dst:1", "src:2")
    c.close()


def test_selectors_widen_what_the_root_allows(server, admin):
    admin.execute_command("ACL", "SETUSER", "sel", "on", ">pw", "+get", "~a:*", "(+set ~b:*)")
    c = as_user(server, "sel")
    assert c.set("b:1", "x") and c.get("a:1") is None
    with pytest.raises(redis.exceptions.NoPermissionError):
        c.get("b:1")  # the selector allows SET on b:*, the root GET on a:*
    with pytest.raises(redis.exceptions.NoPermissionError):
        c.set("a:1", "x")
    assert "(~b:* resetchannels -@all +set)" in admin.execute_command("ACL", "LIST")[1]
    admin.execute_command("ACL", "SETUSER", "sel", "clearselectors")
    with pytest.raises(redis.exceptions.NoPermissionError):
        c.set("b:1", "x")
    c.close()


def test_subcommands_and_first_args(server, admin):
    admin.execute_command("ACL", "SETUSER", "sub", "on", ">pw", "allkeys", "-@all", "+config|get", "+select|0")
    c = as_user(server, "sub")
    assert c.config_get("maxmemory") and c.execute_command("SELECT", 0) is True
    with pytest.raises(redis.exceptions.NoPermissionError, match="'config|set'"):
        c.config_set("maxmemory", 0)
    with pytest.raises(redis.exceptions.NoPermissionError, match="'select'"):
        c.execute_command("SELECT", 1)
    assert admin.acl_getuser("sub")["commands"] == ["+config|get", "+select|0"]
    c.close()


def test_transactions_and_scripts_are_checked(server, admin):
    admin.execute_command("ACL", "SETUSER", "tx", "on", ">pw", "~k*", "+@all", "-flushall")
    c = as_user(server, "tx")
    pipe = c.pipeline()
    pipe.set("k1", "v").execute_command("FLUSHALL")
    with pytest.raises((redis.exceptions.ExecAbortError, redis.exceptions.NoPermissionError)):
        pipe.execute()
    pipe = c.pipeline()
    pipe.set("k1", "v").get("k1")
    assert pipe.execute() == [True, "v"]
    with pytest.raises(redis.exceptions.NoPermissionError, match="no permissions to access one of the keys used as arguments"):
        c.eval("return redis.call('get', KEYS[1])", 1, "other")  # EVAL's own keys are checked first
    with pytest.raises(redis.ResponseError, match="The user executing the script can't access at least one of the keys mentioned"):
        c.eval("return redis.call('get', ARGV[1])", 0, "other")
    with pytest.raises(redis.ResponseError, match="The user executing the script can't run this command or subcommand"):
        c.eval("return redis.call('flushall')", 0)
    assert admin.acl_log(1)[0]["context"] == "lua"
    c.close()


def test_rules_changed_between_queue_and_exec(server, admin):
    admin.execute_command("ACL", "SETUSER", "late", "on", ">pw", "~*", "+@all")
    c = as_user(server, "late")
    conn = c.connection_pool.get_connection()  # queue by hand so the rule change lands before EXEC
    conn.send_command("MULTI")
    assert conn.read_response() == "OK"
    conn.send_command("SET", "x", "1")
    assert conn.read_response() == "QUEUED"
    admin.execute_command("ACL", "SETUSER", "late", "-set")
    conn.send_command("EXEC")
    reply = conn.read_response()
    assert isinstance(reply[0], redis.ResponseError)
    assert "ACLs rules changed between the moment the transaction was accumulated" in str(reply[0])
    c.connection_pool.release(conn)
    c.close()


def test_off_users_and_deleted_users(server, admin):
    admin.execute_command("ACL", "SETUSER", "tmp", "on", ">pw", "+@all", "~*")
    c = as_user(server, "tmp")
    assert c.ping()
    admin.execute_command("ACL", "SETUSER", "tmp", "off")
    assert c.ping()  # off only stops new logins
    with pytest.raises(redis.AuthenticationError):
        as_user(server, "tmp").ping()
    assert admin.acl_deluser("tmp") == 1
    with pytest.raises(redis.ConnectionError):
        c.ping()
    with pytest.raises(redis.ResponseError, match="'default' user cannot be removed"):
        admin.acl_deluser("default")


def test_default_user_off_requires_auth(server, admin):
    admin.execute_command("ACL", "SETUSER", "root", "on", ">rootpw", "+@all", "~*", "&*")
    admin.execute_command("ACL", "SETUSER", "default", "off")
    with pytest.raises(redis.AuthenticationError):
        redis.Redis(port=server.port).ping()
    assert as_user(server, "root", "rootpw").ping()


def test_setuser_errors_change_nothing(admin):
    admin.execute_command("ACL", "SETUSER", "e", "on", "+get")
    cases = [("+nosuch", "Unknown command or category name in ACL"), ("~*", None),
             ("#abc", "The password hash must be exactly 64 characters"), ("<nope", "does not exist"),
             ("(+get", "Unmatched parenthesis in acl selector starting at '(+get'"),
             ("+config|get|x", "Allowing first-arg of a subcommand is not supported"), ("bogus", "Syntax error")]
    for rule, text in cases:
        if text is None:
            continue
        with pytest.raises(redis.ResponseError, match=re.escape(text)):
            admin.execute_command("ACL", "SETUSER", "e", ">good", rule)
        assert admin.acl_getuser("e")["passwords"] == []
    admin.execute_command("ACL", "SETUSER", "e", "~*")
    with pytest.raises(redis.ResponseError, match="Adding a pattern after the \\* pattern"):
        admin.execute_command("ACL", "SETUSER", "e", "~foo")
    with pytest.raises(redis.ResponseError, match="Usernames can't contain spaces"):
        admin.execute_command("ACL", "SETUSER", "a b", "on")


def test_categories(admin):
    cats = admin.acl_cat()
    assert cats[:3] == ["keyspace", "read", "write"] and "pion" in cats
    assert "get" in admin.acl_cat("read") and "config|get" in admin.acl_cat("admin")
    admin.execute_command("ACL", "SETUSER", "cat", "+@pion")
    assert admin.acl_getuser("cat")["categories"] == ["-@all", "+@pion"]


# -- the ACL file ----------------------------------------------------------------------------------


def test_acl_save_load_and_restart(make_server, tmp_path):
    path = tmp_path / "users.acl"
    path.write_text("user default on nopass ~* &* +@all\n")
    srv = make_server(aclfile=str(path))
    c = redis.Redis(port=srv.port, decode_responses=True)
    c.execute_command("ACL", "SETUSER", "kept", "on", ">pw", "~k:*", "+@read", "(+set ~w:*)")
    assert c.execute_command("ACL", "SAVE") == "OK"
    text = path.read_text()
    assert "user kept on #" in text and "(~w:* resetchannels -@all +set)" in text and "pw " not in text
    c.execute_command("ACL", "SETUSER", "gone", "on", "nopass")
    assert c.execute_command("ACL", "LOAD") == "OK"
    assert "gone" not in c.acl_users() and "kept" in c.acl_users()
    path.write_text(text + "user broken on +nosuch\nnot a user line\n")
    with pytest.raises(redis.ResponseError, match="no change to the previously active ACL rules was performed"):
        c.execute_command("ACL", "LOAD")
    assert "kept" in c.acl_users() and "broken" not in c.acl_users()
    path.write_text(text)
    c.close()
    srv.stop()
    again = make_server(aclfile=str(path))
    user = as_user(again, "kept")
    assert user.set("w:1", "x") and user.get("k:1") is None


def test_a_relative_aclfile_is_relative_to_dir(make_server, tmp_path):
    """As in Redis, which chdirs into ``dir``: the Tcl suite's acl unit starts servers this way."""
    (tmp_path / "data0").mkdir()
    (tmp_path / "data0" / "users.acl").write_text("user default on nopass ~* &* +@all\nuser alice on >pw ~a:*\n")
    srv = make_server(aclfile="users.acl")
    c = redis.Redis(port=srv.port, decode_responses=True)
    assert "alice" in c.acl_users()
    c.execute_command("ACL", "SETUSER", "bob", "on", ">pw")
    assert c.execute_command("ACL", "SAVE") == "OK" and "user bob on" in (tmp_path / "data0" / "users.acl").read_text()
    assert c.execute_command("ACL", "LOAD") == "OK"
    c.close()


def test_users_declared_in_the_config_file(make_server, tmp_path):
    """redis.conf ``user`` lines (ACLLoadConfiguredUsers): each user is reset, then its rules
    apply, ``user default ...`` included; a bad rule, or users next to an aclfile, stop the start."""
    from pion.cli.flags import read_file
    from pion.config import settings_from_pairs

    conf = tmp_path / "pion.conf"
    conf.write_text("user default on nopass ~* +@all\nuser alice on >pw ~a:* &news +get +publish\n")
    users = settings_from_pairs(read_file(str(conf))).users
    assert users == ("default on nopass ~* +@all", "alice on >pw ~a:* &news +get +publish")
    srv = make_server(users=users)
    c = redis.Redis(port=srv.port, decode_responses=True)
    with pytest.raises(redis.exceptions.NoPermissionError, match="channels"):
        c.publish("news", "x")  # the default user was reset: no channels (acl-pubsub-default)
    alice = as_user(srv, "alice")
    assert alice.get("a:1") is None and alice.publish("news", "x") == 0
    with pytest.raises(redis.exceptions.NoPermissionError):
        alice.get("b:1")
    assert "user" not in c.config_get("*")
    for clients in (c, alice):
        clients.close()
    with pytest.raises(Exception, match="Error in user declaration 'bob'"):
        make_server(users=("bob on +nosuch",), dir=str(tmp_path / "bad1"))
    with pytest.raises(Exception, match="Error in user declaration 'foo': Duplicate user found"):
        make_server(users=("foo", "foo on"), dir=str(tmp_path / "bad3"))
    acl = tmp_path / "users.acl"
    acl.write_text("user default on nopass ~* &* +@all\n")
    with pytest.raises(Exception, match="users defined in redis.conf and at the same setting an ACL file"):
        make_server(users=("bob on",), aclfile=str(acl), dir=str(tmp_path / "bad2"))


def test_a_broken_aclfile_stops_the_start(make_server, tmp_path):
    path = tmp_path / "bad.acl"
    path.write_text("user x on +nosuchcommand\n")
    with pytest.raises(Exception, match="ACL errors"):
        make_server(aclfile=str(path))


# -- against redis-server --------------------------------------------------------------------------

DIFF_RULES = [
    ["on", ">pw", "~app:*", "+@read"],
    ["on", ">pw", "%R~r:*", "%W~w:*", "+@all"],
    ["on", ">pw", "allkeys", "-@all", "+get", "+config|get", "+select|0"],
    ["on", ">pw", "~a:*", "+get", "(+set ~b:*)"],
    ["on", ">pw", "~*", "resetchannels", "&chan:*", "+publish", "+subscribe", "+psubscribe"],
    ["on", ">pw", "~a*", "resetchannels", "&chan:*", "+get", "+spublish", "+ssubscribe", "+eval", "+publish"],
]
DIFF_COMMANDS = [
    ("GET", "app:1"), ("GET", "x"), ("SET", "app:1", "v"), ("SET", "w:1", "v"), ("GET", "r:1"), ("GET", "w:1"),
    ("COPY", "r:1", "w:2"), ("COPY", "w:1", "r:2"), ("CONFIG", "GET", "maxmemory"), ("CONFIG", "SET", "hz", "10"),
    ("SELECT", "0"), ("SELECT", "1"), ("SET", "b:1", "v"), ("GET", "b:1"), ("GET", "a:1"),
    ("PUBLISH", "chan:1", "m"), ("PUBLISH", "other", "m"), ("MSET", "app:1", "a", "b", "c"),
    ("LMOVE", "r:1", "w:1", "LEFT", "RIGHT"),
    ("SPUBLISH", "chan:1", "m"), ("SPUBLISH", "a:other", "m"),
    ("EVAL", "return redis.call('get', ARGV[1])", "0", "b:1"), ("EVAL", "return redis.call('set', 'a:1', 'v')", "0"),
    ("EVAL", "return redis.call('publish', 'other', 'm')", "0"), ("EVAL", "return redis.call('get', KEYS[1])", "1", "x"),
]
#: checked with ACL DRYRUN only (running them would put the connection in subscribed mode)
DRY_ONLY = [("PSUBSCRIBE", "chan:*"), ("PSUBSCRIBE", "chan:1*"), ("SUBSCRIBE", "chan:2", "x"),
            ("SSUBSCRIBE", "chan:2"), ("SSUBSCRIBE", "a:1")]


def _outcome(client, argv):
    """"ok", or the exact error text: -NOPERM's, a script's ACL failure, or any other refusal."""
    try:
        client.execute_command(*argv)
        return "ok"
    except redis.ResponseError as exc:
        return f"{type(exc).__name__}: {exc}"


@pytest.mark.parametrize("rules", DIFF_RULES, ids=[" ".join(r[2:]) for r in DIFF_RULES])
def test_enforcement_matches_redis(redis_ref, server, rules):
    outcomes = []
    for srv in (server, redis_ref):
        admin = redis.Redis(port=srv.port)
        admin.execute_command("ACL", "SETUSER", "d", "reset", *rules)
        user = redis.Redis(port=srv.port, username="d", password="pw")
        outcomes.append([_outcome(user, argv) for argv in DIFF_COMMANDS])
        getuser = admin.acl_getuser("d")
        outcomes.append((getuser["keys"], getuser["channels"], sorted(getuser["flags"])))
        dry = [admin.acl_dryrun("d", *argv) for argv in DIFF_COMMANDS + DRY_ONLY]
        outcomes.append(dry)
        admin.acl_deluser("d")
        user.close()
        admin.close()
    assert outcomes[0] == outcomes[3] and outcomes[1] == outcomes[4] and outcomes[2] == outcomes[5]


def test_setuser_errors_match_redis(redis_ref, server):
    bad = ["+nosuch", "#abc", "<nope", "(+get", "+config|get|x", "bogus", "%X~a", "~a b", "+@nosuch"]
    for rule in bad:
        texts = []
        for srv in (server, redis_ref):
            c = redis.Redis(port=srv.port)
            with pytest.raises(redis.ResponseError) as info:
                c.execute_command("ACL", "SETUSER", "bad", rule)
            texts.append(str(info.value))
            c.close()
        assert texts[0] == texts[1], rule


def _reply(client, *argv):
    try:
        return client.execute_command(*argv)
    except redis.ResponseError as exc:
        return f"{type(exc).__name__}: {exc}"


def test_acl_argument_errors_match_redis(redis_ref, server):
    calls = [("ACL", "CAT", "a", "b"), ("ACL", "LOG", "1", "2"), ("ACL", "GENPASS", "1", "2"), ("ACL", "LOG", "RESET", "x"),
             ("ACL", "log", "abc"), ("ACL", "GENPASS", "0"), ("ACL", "CAT", "nosuch"), ("ACL", "GETUSER"),
             ("ACL", "DRYRUN", "default", "nosuch"), ("ACL", "DRYRUN", "default", "get"), ("ACL", "nosuch")]
    seen = []
    for srv in (server, redis_ref):
        c = redis.Redis(port=srv.port, decode_responses=True)
        seen.append([_reply(c, *argv) for argv in calls])
        c.close()
    assert seen[0] == seen[1]


def test_sort_by_and_get_need_every_key_like_redis(redis_ref, server):
    """acl-v2.tcl's "Test sort with ACL permissions": BY with a pattern and GET read keys no key
    position names, so only a selector with read access to every key may use them."""
    rules = [["(+sort ~mylist)"], ["(+sort ~mylist ~v*)"], ["(+sort ~mylist %W~*)"], ["(+sort ~mylist %R~*)"],
             ["+sort", "~*"], ["+sort", "~mylist", "(+sort %R~*)"]]
    calls = [("SORT", "mylist", "BY", "v*"), ("SORT", "mylist", "GET", "v*"), ("SORT", "mylist", "BY", "nosort"),
             ("SORT_RO", "mylist", "BY", "v*"), ("SORT", "mylist", "BY", "v*", "bogus")]
    seen = []
    for srv in (server, redis_ref):
        admin = redis.Redis(port=srv.port, decode_responses=True)
        admin.set("v1", 1)
        admin.lpush("mylist", 1)
        outcomes = []
        for rule in rules:
            admin.execute_command("ACL", "SETUSER", "sorter", "reset", "on", "nopass", *rule)
            user = redis.Redis(port=srv.port, username="sorter", password="x", decode_responses=True)
            outcomes.append([_reply(user, *argv) for argv in calls])
            user.close()
        admin.acl_deluser("sorter")
        admin.delete("v1", "mylist")
        admin.close()
        seen.append(outcomes)
    assert seen[0] == seen[1]


def test_acl_pubsub_default_like_redis(redis_ref, server):
    """acl-pubsub-default allchannels: users made after it, ``reset`` and new selectors get ``&*``
    (and a channel pattern on top of that is refused); users made before keep what they had."""
    steps = [("ACL", "SETUSER", "before"), ("CONFIG", "SET", "acl-pubsub-default", "allchannels"),
             ("ACL", "SETUSER", "after"), ("ACL", "SETUSER", "sel", "(+get ~a)"), ("ACL", "SETUSER", "one", "&test"),
             ("ACL", "SETUSER", "before", "reset"), ("CONFIG", "SET", "acl-pubsub-default", "resetchannels"),
             ("ACL", "SETUSER", "late"), ("ACL", "SETUSER", "after", "reset")]
    seen = []
    for srv in (server, redis_ref):
        c = redis.Redis(port=srv.port, decode_responses=True)
        replies = [_reply(c, *argv) for argv in steps]
        described = [c.execute_command("ACL", "GETUSER", name) for name in ("before", "after", "sel", "late")]
        shown = [(d["channels"] if isinstance(d, dict) else dict(zip(d[::2], d[1::2], strict=True))["channels"])
                 for d in described]
        shown.append(sorted(line for line in c.execute_command("ACL", "LIST") if not line.startswith("user default")))
        c.execute_command("ACL", "DELUSER", "before", "after", "sel", "one", "late")
        c.execute_command("CONFIG", "SET", "acl-pubsub-default", "resetchannels")
        c.close()
        seen.append((replies, shown))
    assert seen[0] == seen[1]


def test_acl_load_closes_the_connections_of_reloaded_users_like_redis(make_server, tmp_path):
    """ACL LOAD frees every user but ``default`` (copied in place) and kills their clients; the
    caller, when it is such a user, gets its OK and then loses the connection (acl.tcl's "ACL
    load and save"). Compared with a redis-server started on the same ACL file, on raw sockets
    (redis-py would reconnect behind the test's back)."""
    from tests.conftest import RawConnection
    from tests.support.servers import RedisServer

    if not RedisServer.available():
        pytest.skip("redis-server not installed")
    text = "user default on nopass ~* &* +@all\nuser alice on >alice ~* &* +@all\nuser eve on >eve ~* +get\n"
    for name in ("pion", "redis"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "users.acl").write_text(text)
    ref = RedisServer(tmp_path / "redis", "--aclfile", str(tmp_path / "redis" / "users.acl")).start()
    try:
        seen = []
        for port in (make_server(aclfile="users.acl", dir=str(tmp_path / "pion")).port, ref.port):
            plain, alice, eve = RawConnection(port), RawConnection(port), RawConnection(port)
            for conn, user in ((alice, "alice"), (eve, "eve")):
                conn.cmd("AUTH", user, user)
                conn.read_exactly(b"+OK\r\n")
            alice.cmd("ACL", "LOAD")
            outcome = [alice.read_some()]
            outcome += [conn.is_closed() for conn in (alice, eve, plain)]
            plain.cmd("PING")
            outcome.append(plain.read_some())
            seen.append(outcome)
            for conn in (plain, alice, eve):
                conn.close()
    finally:
        ref.stop()
    assert seen[0] == seen[1] == [b"+OK\r\n", True, True, False, b"+PONG\r\n"]
