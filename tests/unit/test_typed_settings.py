"""Redis's parameters that Pion acts on are typed ``Settings`` fields (``pion.config.REDIS_TYPED``),
not strings in ``Settings.extra``; CONFIG GET/SET/REWRITE and the command line see them as before."""

from __future__ import annotations

from dataclasses import fields

import pytest

from pion.cli.server_main import build_settings
from pion.config import PARAMETERS, REDIS_TYPED, ConfigError, Settings
from pion.server.admin import config_table as table
from pion.server.commands.control.config import _build_settings, current_value

FIELDS = {f.name for f in fields(Settings)}


@pytest.mark.parametrize("name", sorted(REDIS_TYPED))
def test_each_typed_parameter_is_redis_s_with_the_same_default(name):
    param = table.PARAMS[name]  # a Redis parameter the config table knows
    field_name = PARAMETERS[name][0]
    assert field_name in FIELDS
    # CONFIG GET and CONFIG REWRITE's default: the field's default reads back as Redis's default,
    # what CONFIG GET answered when the value lived in Settings.extra and was unset
    assert current_value(Settings(), name) == param.default


def test_typed_values_at_start_never_land_in_extra():
    settings = build_settings(["--latency-tracking", "no", "--latency-monitor-threshold", "25",
                               "--latency-tracking-info-percentiles", "50.0", "99.99",
                               "--repl-backlog-size", "2mb", "--stop-writes-on-bgsave-error", "no",
                               "--stream-node-max-entries", "7", "--hash-max-listpack-entries", "64"])
    assert settings.latency_tracking is False and settings.latency_monitor_threshold == 25
    assert settings.latency_tracking_info_percentiles == (50.0, 99.99)
    assert settings.repl_backlog_size == 2 * 1024 * 1024 and settings.stop_writes_on_bgsave_error is False
    assert settings.stream_node_max_entries == 7
    assert dict(settings.extra) == {"hash-max-listpack-entries": "64"}  # stored, shapes OBJECT ENCODING only
    assert current_value(settings, "latency-tracking-info-percentiles") == "50 99.99"
    assert current_value(settings, "repl-backlog-size") == str(2 * 1024 * 1024)


def test_output_limits_at_start_merge_into_the_defaults():
    settings = build_settings(["--client-output-buffer-limit", "pubsub", "1mb", "0", "0"])
    assert settings.client_output_buffer_limit == (
        ("normal", 0, 0, 0), ("slave", 268435456, 67108864, 60), ("pubsub", 1024 * 1024, 0, 0))
    assert current_value(settings, "client-output-buffer-limit") == \
        "normal 0 0 0 slave 268435456 67108864 60 pubsub 1048576 0 0"
    with pytest.raises(ConfigError, match="Invalid client class"):
        build_settings(["--client-output-buffer-limit", "master", "1", "2", "3"])


def test_an_alias_at_start_sets_the_typed_field():
    settings = build_settings(["--slave-read-only", "no", "--lua-time-limit", "250",
                               "--repl-ping-slave-period", "3", "--slave-priority", "7"])
    assert settings.replica_read_only is False and settings.busy_reply_threshold == 250
    assert (settings.repl_ping_replica_period, settings.replica_priority) == (3, 7)
    assert settings.extra == ()


@pytest.mark.parametrize(("args", "message"), [
    (("--repl-backlog-size", "0"), "argument must be between 1 and"),
    (("--latency-tracking-info-percentiles", "101"), "should sit between [0.0,100.0]"),
    (("--latency-tracking", "maybe"), "argument must be 'yes' or 'no'"),
    (("--busy-reply-threshold", "-1"), "argument must be between 0 and"),
])
def test_a_bad_value_at_start_is_refused_as_config_set_refuses_it(args, message):
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]").replace(".", r"\.")):
        build_settings(list(args))


def test_config_set_of_a_typed_parameter_sets_the_field():
    old = Settings()
    new = _build_settings(old, ["busy-reply-threshold", "latency-tracking"], [("lua-time-limit", "100"),
                                                                             ("latency-tracking", "no")])
    assert new.busy_reply_threshold == 100 and new.latency_tracking is False and new.extra == ()
    assert current_value(new, "lua-time-limit") == "100"
