"""node-redis (@redis/client 6.3.1, unchanged) against Pion: tests/clients/node/check.mjs runs strings,
keys, hashes, lists (and a blocking pop), sets, sorted sets, streams and groups, geo/HLL/bitmaps/scans,
MULTI/WATCH, pipelines, error replies, Lua, pub/sub and RESP3 types, in RESP2 and RESP3.

Skipped unless ``node`` is on PATH and ``npm ci`` was run in tests/clients/node (``make test`` does not
install it; see docs/clients.md). The same script is also run against Debian's redis-server, so its
expectations are Redis's own.
"""

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


def _run_check(port: int) -> subprocess.CompletedProcess:
    return subprocess.run([NODE, "check.mjs", str(port)], cwd=NODE_DIR, capture_output=True, text=True, timeout=120)


def test_node_redis_client_against_pion(server):
    done = _run_check(server.port)
    failures = [line for line in done.stdout.splitlines() if not line.startswith("ok ")]
    assert done.returncode == 0, "\n".join(failures) + done.stderr
    assert "summary: " in done.stdout and " 0 failed" in done.stdout


def test_node_check_script_passes_against_redis(redis_ref):
    """Keeps the script honest: what it expects is what real Redis answers."""
    done = _run_check(redis_ref.port)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("which", ["pion", "redis"])
def test_node_redis_client_side_cache(which, request):
    """node-redis with ``clientSideCache`` (RESP3): ready, cached reads, invalidation (csc.mjs)."""
    srv = request.getfixturevalue("server" if which == "pion" else "redis_ref")
    done = subprocess.run([NODE, "csc.mjs", str(srv.port)], cwd=NODE_DIR, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ok invalidated by FLUSHALL" in done.stdout


@pytest.mark.parametrize("which", ["pion", "redis"])
def test_node_redis_own_client_side_cache_tests(which, request):
    """node-redis's own cache.spec.ts integration tests (Basic Cache, Pooled Cache, stats; the
    bodies unchanged, in csc_suite.mjs): 16 tests, RESP3, CLIENT TRACKING driven by the client."""
    srv = request.getfixturevalue("server" if which == "pion" else "redis_ref")
    done = subprocess.run([NODE, "csc_suite.mjs", str(srv.port)], cwd=NODE_DIR, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "16 passed, 0 failed" in done.stdout
