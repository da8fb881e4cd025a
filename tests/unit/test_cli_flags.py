"""pion-server's start-up parse (issue 12, defect 7): what redis-server refuses, Pion refuses."""

from __future__ import annotations

import pytest

from pion.cli.server_main import build_settings, main
from pion.config import ConfigError


def refused(*args: str) -> str:
    with pytest.raises(ConfigError) as exc:
        build_settings(list(args))
    return str(exc.value)


def test_a_short_form_after_a_value_is_an_option_not_part_of_the_value():
    settings = build_settings(["--dir", "D", "-p", "17431"])
    assert settings.dir == "D" and settings.port == 17431


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--totally-bogus", "1"), "unknown option --totally-bogus"),
        (("--prot", "1974"), "unknown option --prot (did you mean --port?)"),
        (("--kv-maxmemroy", "1gb"), "unknown option --kv-maxmemroy (did you mean --kv-maxmemory?)"),
        (("--port",), "--port: wrong number of arguments (0 given: nothing)"),
        (("--port", "1", "2"), "--port: wrong number of arguments (2 given: 1 2)"),
        (("--dir", "a", "b"), "--dir: wrong number of arguments (2 given: a b)"),
        (("-x", "3"), "unknown option -x (the single-dash forms are -p, -w, -G, -M)"),
        (("-w", "4"), "--workers is not supported: Pion serves every client from one event loop"),
        (("--moe-cache-mib", "lots"), "moe-cache-mib: argument couldn't be parsed into an integer"),
        (("--no-wal", "yes"), "--no-wal takes no value (got 'yes')"),
        (("--activedefrag", "maybe"), "--activedefrag: argument must be 'yes' or 'no'"),
        (("--replicaof", "127.0.0.1", "port"), "Invalid master port"),
        (("stray",), "No such file or directory"),
    ],
)
def test_what_redis_server_refuses_is_refused(args, message):
    try:
        text = refused(*args)
    except OSError as exc:  # a first argument that is not a flag is a config file
        text = str(exc)
    assert message in text


def test_metal_attention_says_where_attend_runs():
    """Issue 12, defect 9: the refusal must say what is true of ATTEND.* (it runs on the CPU)."""
    text = refused("--metal-attention")
    assert "ATTEND.* on the CPU" in text


def test_moe_and_attention_flags_are_parameters_now():
    settings = build_settings(["--moe-cache", "/tmp/experts", "--moe-cache-mib", "512", "--fa-window", "64"])
    assert (settings.moe_cache, settings.moe_cache_mib, settings.attention_fa_window) == ("/tmp/experts", 512, 64)


def test_flags_that_are_accepted_do_what_they_say():
    assert build_settings(["--no-wal"]).appendonly is False
    assert build_settings(["--wal-size", "16"]).wal_segment_size == 16 * 1024 * 1024
    crumbs = build_settings(["--crash-log", "/var/log/p.log", "--status-file", "s", "--rss-warn-pct", "90"])
    assert (crumbs.crash_log, crumbs.status_file, crumbs.rss_warn_pct) == ("/var/log/p.log", "s", 90)
    assert build_settings(["--no-crash-log"]).breadcrumbs is False
    assert build_settings(["--save"]).save == "" and build_settings(["--save", ""]).save == ""
    assert build_settings(["--bind", "127.0.0.1", "::1"]).bind == ("127.0.0.1", "::1")
    assert build_settings(["--slowlog-log-slower-than", "-1"]).slowlog_log_slower_than == -1
    assert dict(build_settings(["--hash-max-listpack-entries", "64"]).extra)["hash-max-listpack-entries"] == "64"


def test_a_config_file_is_held_to_the_same_rules(tmp_path):
    good = tmp_path / "good.conf"
    good.write_text("# comment\nport 7000\nsave 900 1 300 10\ndir \"a dir\"\n")
    settings = build_settings([str(good), "--port", "7001"])
    assert settings.port == 7001 and settings.save == "900 1 300 10" and settings.dir == "a dir"
    bad = tmp_path / "bad.conf"
    bad.write_text("port 7000\nprot 7001\n")
    assert refused(str(bad)) == f"unknown directive {bad}:2: 'prot' (did you mean --port?)"
    bad.write_text("dir a b\n")
    assert refused(str(bad)) == f"{bad}:1: 'dir': wrong number of arguments (2 given: a b)"


def test_main_refuses_the_start_with_the_reason_and_exit_2(capsys):
    assert main(["--prot", "1974"]) == 2
    assert capsys.readouterr().err == "pion-server: unknown option --prot (did you mean --port?)\n"
    assert main(["--port", "0", "--help"]) == 0
    assert "usage: pion-server" in capsys.readouterr().out
