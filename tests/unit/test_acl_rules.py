"""The ACL rule engine alone (no server): rules, their 7.2-style description, checks, the file."""

from __future__ import annotations

import pytest

from pion.server.security.acl_rules import ALL, READ, WRITE, Catalog, CommandRef, RuleError, Selector
from pion.server.security.acl_users import DENIED_CHANNEL, DENIED_CMD, DENIED_KEY, OK, User, UserTable, hash_password

CATALOG = Catalog([
    CommandRef("get", categories=frozenset({"read", "string", "fast"})),
    CommandRef("set", categories=frozenset({"write", "string", "slow"})),
    CommandRef("hset", categories=frozenset({"write", "hash", "fast"})),
    CommandRef("hget", categories=frozenset({"read", "hash", "fast"})),
    CommandRef("select", categories=frozenset({"fast", "connection"})),
    CommandRef("config", subcommands=("config|get", "config|set")),
    CommandRef("config|get", parent="config", categories=frozenset({"admin", "slow"})),
    CommandRef("config|set", parent="config", categories=frozenset({"admin", "slow"})),
    CommandRef("publish", categories=frozenset({"pubsub", "fast"})),
    CommandRef("auth", categories=frozenset({"connection", "fast"}), no_auth=True),
])


def keys_at(*positions, flags=ALL):
    return lambda ref, argv: [(p, flags) for p in positions if p < len(argv)]


def no_channels(ref, argv):
    return []


def selector(*rules: str) -> Selector:
    s = Selector(root=True)
    for rule in rules:
        s.apply(rule.encode(), CATALOG)
    return s


def test_rules_are_kept_as_written_later_ones_replacing_earlier():
    s = selector("-@all", "+@string", "+@hash", "-hset", "+get", "-@string")
    assert s.command_rules() == "-@all +@hash -hset +get -@string"
    assert s.allowed == {"hget"}
    assert selector("+@all", "-config").command_rules() == "+@all -config"
    assert selector("+config|get", "+config").command_rules() == "-@all +config"


def test_all_commands_flag_and_future_bit():
    s = selector("+@all")
    assert s.allcommands and s.future
    s.apply(b"-get", CATALOG)
    assert not s.allcommands and s.future and "set" in s.allowed and "get" not in s.allowed


def test_first_args_and_subcommands():
    s = selector("+select|0", "+config|get")
    assert s.can_run(CATALOG.lookup("select"), [b"SELECT", b"0"])
    assert not s.can_run(CATALOG.lookup("select"), [b"SELECT", b"1"])
    assert s.can_run(CATALOG.lookup("config|get"), [b"CONFIG", b"GET", b"x"])
    assert not s.can_run(CATALOG.lookup("config|set"), [b"CONFIG", b"SET", b"x", b"y"])
    assert s.can_run(CATALOG.lookup("auth"), [b"AUTH", b"x"])  # no_auth commands always run
    with pytest.raises(RuleError, match="first-arg of a subcommand"):
        s.apply(b"+config|get|x", CATALOG)


def test_key_patterns_with_read_write_flags():
    s = selector("%R~r:*", "%W~w:*", "~a:*", "%RW~r:*")
    assert s.key_rules() == ["~r:*", "%W~w:*", "~a:*"]
    assert s.can_access_key(b"w:1", WRITE) and not s.can_access_key(b"w:1", READ)
    assert s.can_access_key(b"a:x", READ | WRITE) and s.can_access_key(b"zzz", 0) is False
    with pytest.raises(RuleError) as err:
        selector("~*", "~x")
    assert "resetkeys" in str(err.value)


def test_channels_patterns_match_literally():
    s = selector("resetchannels", "&news:*")
    assert s.can_use_channel(b"news:1", False) and not s.can_use_channel(b"news:1*", True)
    assert s.can_use_channel(b"news:*", True)
    assert s.describe() == "resetchannels &news:* -@all"


def test_user_check_picks_the_most_relevant_refusal():
    user = User("u", enabled=True)
    for rule in (b"+get", b"~a:*", b"(+get ~b:*)"):
        user.apply(rule, CATALOG)
    get = CATALOG.lookup("get")
    assert user.check(get, [b"GET", b"b:1"], keys_at(1), no_channels) == (OK, 0)
    assert user.check(get, [b"GET", b"c:1"], keys_at(1), no_channels) == (DENIED_KEY, 1)
    assert user.check(CATALOG.lookup("set"), [b"SET", b"a:1", b"v"], keys_at(1), no_channels) == (DENIED_CMD, 0)
    user.apply(b"+publish", CATALOG)
    channel = user.check(CATALOG.lookup("publish"), [b"PUBLISH", b"c", b"m"], keys_at(), lambda r, a: [(1, False)])
    assert channel == (DENIED_CHANNEL, 1)


def test_passwords_flags_and_reset():
    user = User("u")
    for rule in (b">one", b">two", b"on", b"<one"):
        user.apply(rule, CATALOG)
    assert user.passwords == [hash_password(b"two")] and user.accepts(b"two") and not user.accepts(b"one")
    user.apply(b"off", CATALOG)
    assert not user.accepts(b"two")
    user.apply(b"reset", CATALOG)
    assert user.describe() == "off sanitize-payload resetchannels -@all"
    with pytest.raises(RuleError, match="does not exist"):
        user.apply(b"<never", CATALOG)


def test_setuser_is_all_or_nothing_and_selectors_merge():
    table = UserTable(CATALOG)
    table.set_user("u", [b"on", b">pw", b"(+get", b"~x)"])
    assert table.get("u").describe().endswith("(~x resetchannels -@all +get)")
    with pytest.raises(ValueError, match="Error in ACL SETUSER modifier '\\+nosuch'"):
        table.set_user("u", [b"+set", b"+nosuch"])
    assert "set" not in table.get("u").root.allowed
    with pytest.raises(ValueError, match="Unmatched parenthesis"):
        table.set_user("u", [b"(+get"])


def test_the_file_round_trips_and_a_bad_line_loads_nothing(tmp_path):
    table = UserTable(CATALOG)
    table.set_user("u", [b"on", b"#" + hash_password(b"pw"), b"~k:*", b"+@read", b"(+set ~w:*)"])
    text = table.file_text()
    again = UserTable(CATALOG)
    path = tmp_path / "users.acl"
    path.write_text(text)
    assert again.load_file(str(path)) is None
    assert again.file_text() == text
    path.write_text(text + "user bad on +nosuch\nuser u on\n")
    error = again.load_file(str(path))
    assert "Error in applying operation '+nosuch'" in error and "Duplicate user 'u'" in error
    assert again.file_text() == text
