"""ACL with tenants: the default user and the --tenant users, in Redis 7's reply shapes (RESP2 and
RESP3); tenants stay bound to their keyspaces and their limits (tests/compat/test_acl_users.py has
the rule language and enforcement)."""

from __future__ import annotations

import hashlib

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

ADMIN_PW = "adm1n"


def connect(srv, user, password, protocol=2) -> redis.Redis:
    return redis.Redis(port=srv.port, username=user, password=password, protocol=protocol,
                       socket_timeout=10, retry=Retry(NoBackoff(), 0), decode_responses=True)


@pytest.fixture
def srv(make_server):
    return make_server(requirepass=ADMIN_PW, tenants=("alice:apw", "bob:bpw:quota=10mb"))


@pytest.fixture(params=[2, 3], ids=["resp2", "resp3"])
def admin(request, srv):
    c = connect(srv, None, ADMIN_PW, request.param)
    yield c
    c.close()


@pytest.fixture
def bob(srv):
    c = connect(srv, "bob", "bpw")
    yield c
    c.close()


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def test_whoami_and_users(admin, bob):
    assert admin.acl_whoami() == "default" and bob.acl_whoami() == "bob"
    assert admin.acl_users() == ["alice", "bob", "default"]


def test_list_shows_digests_and_the_tenant_rules(admin):
    lines = admin.acl_list()
    assert lines[2] == f"user default on #{sha(ADMIN_PW)} ~* &* +@all"
    assert lines[0].startswith(f"user alice on #{sha('apw')} ~* &* +@all -@admin ")
    assert "+client|list" in lines[0] and "-memory|stats" in lines[0]
    assert "apw" not in " ".join(lines).replace(sha("apw"), "")


def test_getuser(admin):
    user = admin.acl_getuser("alice")
    assert user["flags"] == ["on"] and user["passwords"] == [sha("apw")]
    assert user["keys"] == ["~*"] and user["channels"] == ["&*"] and user["selectors"] == []
    assert admin.acl_getuser("nobody") is None
    raw = admin.execute_command("ACL", "GETUSER", "default")
    if isinstance(raw, list):
        raw = dict(zip(raw[::2], raw[1::2], strict=True))
    assert raw["commands"] == "+@all"


def test_getuser_of_the_nopass_default_user(r):
    assert r.acl_getuser("default")["flags"] == ["on", "nopass"]
    assert r.acl_list() == ["user default on nopass ~* &* +@all"]


def test_cat_lists_categories_and_their_commands(admin):
    categories = admin.acl_cat()
    assert {"admin", "read", "write", "string", "keyspace", "pion"} <= set(categories)
    assert "get" in admin.acl_cat("string") and "config|set" in admin.acl_cat("admin")
    with pytest.raises(redis.ResponseError, match="Unknown category 'nosuch'"):
        admin.acl_cat("nosuch")


def test_dryrun_uses_the_same_check_as_the_dispatcher(admin, bob):
    assert admin.acl_dryrun("bob", "get", "x") in ("OK", True)
    refused = admin.acl_dryrun("bob", "config", "set", "maxmemory", "1")
    assert refused == "This user has no permissions to run the 'config|set' command"
    with pytest.raises(redis.exceptions.NoPermissionError, match="'config|set'"):
        bob.config_set("maxmemory", 1)
    assert admin.acl_dryrun("default", "config", "set", "maxmemory", "1") in ("OK", True)
    assert admin.acl_dryrun("bob", "client", "list") in ("OK", True)
    with pytest.raises(redis.ResponseError, match="User 'nobody' not found"):
        admin.acl_dryrun("nobody", "get", "x")
    with pytest.raises(redis.ResponseError, match="Command 'nosuch' not found"):
        admin.acl_dryrun("bob", "nosuch")


def test_log_records_failed_auth_and_refused_commands(srv, admin, bob):
    with pytest.raises(redis.exceptions.NoPermissionError):
        bob.execute_command("DEBUG", "SLEEP", "0")
    with pytest.raises(redis.AuthenticationError):
        connect(srv, "alice", "wrong").ping()
    entries = admin.acl_log()
    assert entries[0]["reason"] == "auth" and entries[0]["username"] == "alice" and entries[0]["object"] == "AUTH"
    assert entries[1]["reason"] == "command" and entries[1]["object"] == "debug"
    assert "wrong" not in repr(entries)
    assert len(admin.acl_log(1)) == 1
    assert admin.acl_log_reset()
    assert admin.acl_log() == []


def test_genpass(admin):
    assert len(admin.acl_genpass()) == 64 and len(admin.acl_genpass(5)) == 2
    with pytest.raises(redis.ResponseError, match="positive number up to 4096"):
        admin.acl_genpass(0)


@pytest.mark.parametrize("sub", [("SETUSER", "carol", "on", ">pw"), ("DELUSER", "alice"), ("SAVE",), ("LOAD",)])
def test_tenants_cannot_change_users(bob, sub):
    with pytest.raises(redis.exceptions.NoPermissionError):
        bob.execute_command("ACL", *sub)


def test_a_tenant_cannot_be_deleted_but_its_rules_can_narrow(admin, bob):
    with pytest.raises(redis.ResponseError, match="is a tenant with a keyspace of its own"):
        admin.acl_deluser("bob")
    with pytest.raises(redis.ResponseError, match="Adding a pattern after the"):
        admin.acl_setuser("bob", keys=["mine:*"])
    admin.execute_command("ACL", "SETUSER", "bob", "resetkeys", "~mine:*")
    assert bob.set("mine:1", "x")
    with pytest.raises(redis.exceptions.NoPermissionError, match="no permissions to access one of the keys used as arguments"):
        bob.set("other", "x")
    admin.execute_command("ACL", "SETUSER", "bob", "+@admin")  # the tenant limits hold whatever the rules say
    with pytest.raises(redis.exceptions.NoPermissionError, match="'config|set'"):
        bob.config_set("maxmemory", 1)


@pytest.mark.parametrize("sub", ["SAVE", "LOAD"])
def test_save_and_load_need_an_aclfile(admin, sub):
    with pytest.raises(redis.ResponseError, match="not configured to use an ACL file"):
        admin.execute_command("ACL", sub)


def test_tenants_may_ask_who_they_are_but_not_list_users(bob):
    assert bob.execute_command("ACL", "WHOAMI") == "bob"
    assert bob.execute_command("ACL", "HELP")[0].startswith("ACL <subcommand>")
    for sub in ("LIST", "USERS", "LOG"):
        with pytest.raises(redis.exceptions.NoPermissionError):
            bob.execute_command("ACL", sub)


def test_client_kill_user(admin, srv):
    alice = connect(srv, "alice", "apw")
    alice.ping()
    assert admin.execute_command("CLIENT", "KILL", "USER", "alice") == 1
    with pytest.raises(redis.ResponseError, match="No such user 'carol'"):
        admin.execute_command("CLIENT", "KILL", "USER", "carol")
