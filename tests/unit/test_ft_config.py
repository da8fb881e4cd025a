"""FT.CONFIG's option table (``pion.vector.ft_config``): RediSearch 2.10's checks, shared values and
what Pion applies. The replies themselves are diffed against Redis Stack (``ft_config`` case)."""

from __future__ import annotations

import pytest

from pion.vector import ft_config


def test_defaults_and_names():
    names = ft_config.names("*")
    assert names[:3] == ["EXTLOAD", "NOGC", "MINPREFIX"] and len(names) == 36
    assert ft_config.names("minprefix") == ["MINPREFIX"] and ft_config.names("MIN*") == []
    assert "EXTLOAD" not in ft_config.DEFAULTS and ft_config.DEFAULTS["TIMEOUT"] == "500"


@pytest.mark.parametrize("name, args, message", [
    ("FOO", ["1"], "Invalid option"),
    ("NOGC", [], "Not modifiable at runtime"),
    ("MINPREFIX", ["0"], "Value is outside acceptable bounds"),
    ("MINPREFIX", ["x"], "Could not convert argument to expected type"),
    ("TIMEOUT", [], "Expected an argument, but none provided"),
    ("DEFAULT_DIALECT", ["5"], "Default dialect version cannot be higher than 4"),
    ("MINSTEMLEN", ["x"], "Minimum stem length cannot be lower than 2"),
    ("ON_TIMEOUT", ["maybe"], "Invalid ON_TIMEOUT value"),
    ("_PRINT_PROFILE_CLOCK", ["yes"], "Could not convert argument to expected type"),
])
def test_refusals_change_nothing(name, args, message):
    config = dict(ft_config.DEFAULTS)
    with pytest.raises(ft_config.ConfigError, match=message):
        ft_config.set_option(config, name, args)
    assert config == ft_config.DEFAULTS


def test_values_shared_and_spelled():
    config = dict(ft_config.DEFAULTS)
    assert ft_config.set_option(config, "maxprefixexpansions", ["7", "extra"]) == 1  # EXCESSARGS
    assert config["MAXEXPANSIONS"] == config["MAXPREFIXEXPANSIONS"] == "7"
    ft_config.set_option(config, "MAXSEARCHRESULTS", ["-1"])
    assert config["MAXSEARCHRESULTS"] == "unlimited"
    ft_config.set_option(config, "MAXSEARCHRESULTS", ["-5"])
    assert config["MAXSEARCHRESULTS"] == str(2**64 - 5)
    assert ft_config.set_option(config, "FORK_GC_CLEAN_NUMERIC_EMPTY_NODES", ["x"]) == 0  # a flag reads nothing
    ft_config.set_option(config, "_FORK_GC_CLEAN_NUMERIC_EMPTY_NODES", ["FALSE"])
    assert config["FORK_GC_CLEAN_NUMERIC_EMPTY_NODES"] == "false"


def test_minprefix_and_maxexpansions_apply(r):
    r.execute_command("FT.CREATE", "i", "SCHEMA", "t", "TEXT")
    for i, word in enumerate(["apple", "apricot", "apply", "ape"]):
        r.hset(f"d{i}", "t", word)
    assert r.execute_command("FT.SEARCH", "i", "a*", "NOCONTENT")[0] == 0  # MINPREFIX 2: too short
    r.execute_command("FT.CONFIG", "SET", "MINPREFIX", "1")
    assert r.execute_command("FT.SEARCH", "i", "a*", "NOCONTENT")[0] == 4
    r.execute_command("FT.CONFIG", "SET", "MAXEXPANSIONS", "1")
    assert r.execute_command("FT.SEARCH", "i", "ap*", "NOCONTENT")[0] == 1
