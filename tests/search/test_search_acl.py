"""FT.* ACL categories as Redis 8's search module registers them: every command is in @search, and
only some also in @read, @write or @admin (Redis implies none from a module command's flags). RedisVL
0.28's integration suite relies on both edges: `+@all -@admin` may not run FT._LIST but may run
FT.INFO, and `+@read +@write -@dangerous` may run FT.SEARCH but not FT.INFO."""

from __future__ import annotations

import pytest
import redis


@pytest.fixture
def user(server, rr):
    rr.execute_command("FT.CREATE", "i", "ON", "HASH", "PREFIX", "1", "d:", "SCHEMA", "t", "TEXT")
    rr.hset("d:1", "t", "hello")

    def connect(*rules: str) -> redis.Redis:
        rr.execute_command("ACL", "SETUSER", "u", "reset", "on", ">pw", "~*", "&*", *rules)
        return redis.Redis(host="127.0.0.1", port=server.port, username="u", password="pw", protocol=2,
                           socket_timeout=10)

    yield connect
    rr.execute_command("ACL", "DELUSER", "u")


def test_no_admin_may_not_list_but_may_read_info(user):
    c = user("+@all", "-@admin")
    with pytest.raises(redis.exceptions.NoPermissionError):
        c.execute_command("FT._LIST")
    assert c.execute_command("FT.INFO", "i")
    c.close()


def test_read_write_may_search_but_not_info_or_create(user):
    c = user("+@read", "+@write", "-@dangerous")
    assert c.execute_command("FT.SEARCH", "i", "hello", "NOCONTENT")[0] == 1
    assert c.execute_command("FT.AGGREGATE", "i", "*")[0] == 1
    for args in (("FT.INFO", "i"), ("FT.CREATE", "j", "SCHEMA", "t", "TEXT"), ("FT.TAGVALS", "i", "t")):
        with pytest.raises(redis.exceptions.NoPermissionError):
            c.execute_command(*args)
    c.close()


def test_acl_cat_lists_ft_commands_by_their_module_categories(rr):
    read = {x.decode().upper() if isinstance(x, bytes) else x.upper() for x in rr.execute_command("ACL", "CAT", "read")}
    search = {x.decode().upper() if isinstance(x, bytes) else x.upper() for x in rr.execute_command("ACL", "CAT", "search")}
    assert {"FT.SEARCH", "FT.AGGREGATE", "FT.CURSOR", "FT.PROFILE", "FT.SUGGET", "FT.SUGLEN"} <= read
    assert not {"FT.INFO", "FT.CREATE", "FT.EXPLAIN", "FT._LIST", "FT.SPELLCHECK"} & read
    assert {"FT.INFO", "FT.CREATE", "FT._LIST", "FT.SEARCH", "FT.DROPINDEX"} <= search
