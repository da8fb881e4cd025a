"""``--metrics-port``: /metrics in Prometheus's text format, read back by prometheus_client's own
parser; off by default; loopback by default; bad requests answered, not crashed on."""

from __future__ import annotations

import asyncio
import socket
import urllib.error
import urllib.request

import numpy as np
import pytest
import redis
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.parser import text_string_to_metric_families
from tests.support.servers import ThreadServer, free_port, make_settings

from pion.config import ConfigError
from pion.server.component import Component
from pion.server.errors import StartupError
from pion.server.run import make_server


@pytest.fixture
def served(tmp_path):
    srv = ThreadServer(make_settings(tmp_path, metrics_port=free_port())).start()
    yield srv
    srv.stop()


def scrape(srv) -> dict[str, object]:
    url = f"http://127.0.0.1:{srv.settings.metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=10) as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain; version=")
        text = response.read().decode()
    return {family.name: family for family in text_string_to_metric_families(text)}


def sample(families, family: str, name: str, **labels) -> float:
    for s in families[family].samples:
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
            return s.value
    raise AssertionError(f"no sample {name}{labels} in {family}")


def test_scrape_counts_commands_clients_memory_and_the_log(served):
    r = redis.Redis(port=served.port)
    for i in range(5):
        r.set(f"k{i}", "v")
    r.get("k0")
    r.get("missing")
    errors_before = sum(s.value for s in getattr(scrape(served).get("pion_error_replies"), "samples", []))
    with pytest.raises(redis.ResponseError):
        r.execute_command("INCR", "k0")
    families = scrape(served)
    assert sample(families, "pion_commands", "pion_commands_total", command="set") == 5
    assert sample(families, "pion_commands", "pion_commands_total", command="get") == 2
    assert sample(families, "pion_commands_failed", "pion_commands_failed_total", command="incr") == 1
    assert sum(s.value for s in families["pion_error_replies"].samples) == errors_before + 1
    hist = "pion_command_duration_seconds"
    assert sample(families, hist, hist + "_count", command="set") == 5
    assert sample(families, hist, hist + "_bucket", command="set", le="+Inf") == 5
    assert 0 < sample(families, hist, hist + "_sum", command="set") < 5
    assert sample(families, "pion_connected_clients", "pion_connected_clients") >= 1
    assert sample(families, "pion_keys", "pion_keys", db="0") == 5
    assert sample(families, "pion_memory_used_bytes", "pion_memory_used_bytes") > 0
    fsyncs = sample(families, "pion_wal_fsyncs", "pion_wal_fsyncs_total")
    assert fsyncs >= 1  # appendfsync always: the writes were fsynced
    wal = "pion_wal_fsync_duration_seconds"
    assert sample(families, wal, wal + "_count") == fsyncs
    assert sample(families, "pion_build_info", "pion_build_info", version=served.server.version) == 1


def test_scrape_counts_kv_hits_misses_bytes_and_prefill_saved(served):
    r = redis.Redis(port=served.port)
    r.execute_command("KV.PREFIX.REGISTER", "ns1", 32, "fp32", "PREFILL_MS", 100)
    rows = np.ones((8, 32), np.float32).tobytes()
    for side in ("_pk", "_pv"):
        for layer in range(2):
            r.execute_command("V.STOREBATCH", "ns1" + side, layer, 0, 8, rows)
    assert r.execute_command("KV.PREFIX.LOOKUP", "ns1") == b"HIT"
    fetched = r.execute_command("V.FETCH", "ns1_pk", 0, "RANGE", 0, 8)
    assert r.execute_command("KV.PREFIX.LOOKUP", "nope") == b"MISS"
    families = scrape(served)
    assert sample(families, "pion_kv_prefix_hits", "pion_kv_prefix_hits_total", tenant="default") == 1
    assert sample(families, "pion_kv_prefix_misses", "pion_kv_prefix_misses_total", tenant="default") == 1
    assert sample(families, "pion_kv_prefill_saved_seconds", "pion_kv_prefill_saved_seconds_total",
                  tenant="default") > 0
    assert sample(families, "pion_kv_stored_bytes", "pion_kv_stored_bytes", tenant="default") >= 4 * len(rows)
    served_bytes = sum(len(p) for p in fetched) if isinstance(fetched, list) else len(fetched)
    assert sample(families, "pion_kv_bytes_served", "pion_kv_bytes_served_total", tenant="default") == served_bytes > 0
    assert sample(families, "pion_kv_evictions", "pion_kv_evictions_total", tenant="default") == 0


def test_only_get_metrics_is_served_and_bad_requests_do_not_hurt(served):
    port = served.settings.metrics_port
    with pytest.raises(urllib.error.HTTPError) as missing:
        urllib.request.urlopen(f"http://127.0.0.1:{port}/other", timeout=10)
    assert missing.value.code == 404
    with pytest.raises(urllib.error.HTTPError) as posted:
        urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", data=b"x", timeout=10)
    assert posted.value.code == 405
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(b"GARBAGE\r\n\r\n")
        assert sock.recv(100).startswith(b"HTTP/1.1 400")
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(b"GET /" + b"a" * 10000 + b" HTTP/1.1\r\n\r\n")
        assert sock.recv(100).startswith(b"HTTP/1.1 431")
    assert redis.Redis(port=served.port).ping()
    assert "pion_commands" in scrape(served)


def test_metrics_are_off_by_default(tmp_path):
    srv = ThreadServer(make_settings(tmp_path)).start()
    try:
        assert srv.settings.metrics_port == 0 and srv.settings.metrics_bind == "127.0.0.1"
        assert srv.server.parts.metrics is None
    finally:
        srv.stop()


def test_bad_metrics_settings_refuse_the_start(tmp_path):
    with pytest.raises(ConfigError):
        make_settings(tmp_path, metrics_port=70000)
    with pytest.raises(StartupError, match="metrics-bind"):
        ThreadServer(make_settings(tmp_path, metrics_port=free_port(), metrics_bind="nowhere")).start()
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    try:
        taken = busy.getsockname()[1]
        with pytest.raises(StartupError, match="cannot listen for metrics"):
            ThreadServer(make_settings(tmp_path / "b", metrics_port=taken)).start()
    finally:
        busy.close()


def test_the_grafana_dashboard_queries_only_series_a_scrape_has(served):
    import json
    import re
    from pathlib import Path

    r = redis.Redis(port=served.port)
    r.set("k", "v")
    r.execute_command("KV.PREFIX.LOOKUP", "none")
    names = {s.name for family in scrape(served).values() for s in family.samples}
    dashboard = json.loads((Path(__file__).parents[2] / "docs" / "grafana-pion.json").read_text())
    queried = {name for panel in dashboard["panels"] for target in panel["targets"]
               for name in re.findall(r"pion_\w+", target["expr"])}
    assert len(queried) >= 10
    assert queried <= names, queried - names


def test_components_start_stop_cron_and_add_their_metrics(tmp_path):
    events: list[str] = []

    class Probe(Component):
        def __init__(self, name: str) -> None:
            self.name = name

        async def start(self) -> None:
            events.append(f"start {self.name}")

        async def stop(self) -> None:
            events.append(f"stop {self.name}")

        def cron(self) -> None:
            if f"cron {self.name}" not in events:
                events.append(f"cron {self.name}")

        def metrics(self):
            yield GaugeMetricFamily(f"probe_{self.name}", "a test component's gauge", value=7)

    server = make_server(make_settings(tmp_path, metrics_port=free_port()))
    server.add_component(Probe("a"))  # after the metrics endpoint: started after it, stopped before
    server.add_component(Probe("b"))

    async def run() -> dict:
        await server.start()
        try:
            server.cron_once()
            return {f.name: f for f in text_string_to_metric_families(server.parts.metrics.render().decode())}
        finally:
            await server.stop()

    families = asyncio.run(run())
    assert events == ["start a", "start b", "cron a", "cron b", "stop b", "stop a"]
    assert sample(families, "probe_a", "probe_a") == 7 and sample(families, "probe_b", "probe_b") == 7
    assert "pion_commands" in families or "pion_connected_clients" in families
