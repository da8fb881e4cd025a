"""Start-up flags of the K/V engine: --kvcache is a documented no-op, --kv-maxmemory sets the
budget, reference flags for hardware Pion does not drive are refused with the reason."""

from __future__ import annotations

import pytest

from pion.cli.server_main import USAGE, build_settings, main


def test_kvcache_is_accepted_and_changes_nothing():
    plain = build_settings(["--port", "0"])
    with_flag = build_settings(["--kvcache", "--port", "0"])
    assert with_flag.kv_maxmemory == plain.kv_maxmemory == 0
    assert "--kvcache is accepted" in USAGE and "does nothing" in USAGE


def test_kv_maxmemory_takes_redis_memory_units():
    assert build_settings(["--kv-maxmemory", "2gb"]).kv_maxmemory == 2 * 1024**3
    assert build_settings(["--kv-maxmemory", "500mb"]).kv_maxmemory == 500 * 1024**2


@pytest.mark.parametrize(
    "flag", ["--metal-attention", "--metal-attention-fp16", "--cuda-attention", "--xdp", "--iouring", "--ns-prefix"]
)
def test_flags_we_cannot_honour_are_refused_at_start(flag, capsys):
    assert main([flag, "--port", "0"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"pion-server: {flag} is not supported: ")


def test_kv_maxmemory_is_live_in_config(r):
    assert r.config_get("kv-maxmemory") == {"kv-maxmemory": "0"}
    assert r.config_set("kv-maxmemory", "1mb")
    assert r.config_get("kv-maxmemory") == {"kv-maxmemory": "1048576"}
