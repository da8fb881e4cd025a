"""node-redis's cluster client (``createCluster`` of @redis/client 6.3.1, unchanged) against 1 and
3 Pion nodes, and against a real 3-node redis-server cluster so the script's expectations are
Redis's own (tests/clients/node/cluster.mjs). Skipped unless ``node`` is on PATH and ``npm ci``
was run in tests/clients/node (docs/clients.md)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

NODE_DIR = Path(__file__).resolve().parents[1] / "clients" / "node"
NODE = shutil.which("node")

pytestmark = pytest.mark.skipif(
    NODE is None or not (NODE_DIR / "node_modules" / "@redis" / "client").is_dir(),
    reason="node or tests/clients/node/node_modules missing (run `npm ci` in tests/clients/node)",
)


def _run(port: int) -> subprocess.CompletedProcess:
    return subprocess.run([NODE, "cluster.mjs", str(port)], cwd=NODE_DIR, capture_output=True, text=True, timeout=180)


@pytest.mark.parametrize("which", ["pion1", "pion3", "redis3"])
def test_node_redis_cluster_client(which, request):
    cluster = request.getfixturevalue(which)
    done = _run(cluster.ports[0])
    assert done.returncode == 0, done.stdout + done.stderr
    assert " 0 failed" in done.stdout
