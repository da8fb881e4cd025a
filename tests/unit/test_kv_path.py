"""The K/V store and hit paths run one way through at most six modules (docs/architecture.md).

``tools/kv_path_trace.py`` records the ``pion`` modules on the server's call stack while each
command is in flight; this runs it strictly: a path to where the bytes land longer than six
modules, or one that leaves a module and comes back to it, fails.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_kv_paths_are_at_most_six_modules_one_way():
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "kv_path_trace.py"), "--json"],
                          capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    by_command = {row["command"].split(" (")[0]: row for row in rows}
    assert len(rows) == 5, rows
    store = by_command["V.STOREBATCH FMT RAW"]
    assert store["sinks"]["storage.arena"] == ["server.net.connection", "server.dispatch", "server.commands.kv.vstore",
                                               "kvcache.rows", "storage.arena"]
    assert store["sinks"]["kvcache.layer"][-3:] == ["kvcache.rows", "kvcache.vstore", "kvcache.layer"]
    assert by_command["V.STOREBATCH F32"]["sinks"]["storage.arena"][-2:] == ["kvcache.rows", "storage.arena"]
    assert "kvcache.layer" in by_command["V.FETCH RANGE FMT RAW"]["sinks"]
    for row in rows:
        print(row["command"], row["modules"], " -> ".join(row["path"]))
        assert row["modules"] <= 6, row
        assert row["climb_count"] == 0, row["climbs"]
