"""Redis's ``unit/introspection`` "CONFIG sanity": every parameter ``CONFIG GET *`` shows, bar the
immutable and special ones Redis's test names, takes ``CONFIG SET`` of its own value and reads
back unchanged. Pion's own start-up parameters must pass too, since Redis's tools do not know
them; Redis's immutable parameters are still refused whatever the value."""

from __future__ import annotations

import pytest
import redis

# the skip list of Redis 7's tests/unit/introspection.tcl (without TLS)
REDIS_SKIPS = set("""
rdbchecksum daemonize io-threads-do-reads tcp-backlog always-show-logo syslog-enabled cluster-enabled
disable-thp aclfile unixsocket pidfile syslog-ident appendfilename appenddirname supervised
syslog-facility databases io-threads logfile unixsocketperm replicaof slaveof requirepass
server_cpulist bio_cpulist aof_rewrite_cpulist bgsave_cpulist set-proc-title cluster-config-file
cluster-port oom-score-adj oom-score-adj-values enable-protected-configs enable-debug-command
enable-module-command dbfilename dir socket-mark-id tls-prefer-server-ciphers
tls-session-cache-timeout tls-session-cache-size tls-session-caching tls-cert-file tls-key-file
tls-client-cert-file tls-client-key-file tls-dh-params-file tls-ca-cert-file tls-ca-cert-dir
tls-protocols tls-ciphers tls-ciphersuites tls-port
""".split())


def test_every_parameter_takes_its_own_value_back(make_server):
    srv = make_server()
    with redis.Redis(port=srv.port, decode_responses=True) as r:
        before = {k: v for k, v in r.config_get("*").items() if k not in REDIS_SKIPS}
        refused = {}
        for name, value in before.items():
            try:
                r.config_set(name, value)
            except redis.ResponseError as exc:
                refused[name] = str(exc)
        assert refused == {}
        after = {k: v for k, v in r.config_get("*").items() if k not in REDIS_SKIPS}
        assert after == before


@pytest.mark.parametrize("name", ["crash-log", "breadcrumbs", "rss-warn-pct", "metrics-port"])
def test_pion_start_up_parameters_refuse_another_value(make_server, name):
    srv = make_server()
    with redis.Redis(port=srv.port, decode_responses=True) as r:
        other = {"crash-log": "/tmp/elsewhere.log", "breadcrumbs": "no", "rss-warn-pct": "55",
                 "metrics-port": "9999"}[name]
        before = r.config_get(name)[name]
        with pytest.raises(redis.ResponseError, match="can't set immutable config"):
            r.config_set(name, other)
        assert r.config_get(name)[name] == before


def test_redis_immutable_parameters_refuse_even_their_own_value(make_server):
    srv = make_server()
    with redis.Redis(port=srv.port, decode_responses=True) as r:
        with pytest.raises(redis.ResponseError, match="can't set immutable config"):
            r.config_set("daemonize", r.config_get("daemonize")["daemonize"])
