"""Disk use stays bounded when big values are overwritten or evicted (issue #13, item 5): arena
space is reclaimed only by a snapshot, and the automatic rewrite looked at the log's size alone
(records of big values are a few bytes: their bytes are in arenas), so on main a 100 MB
maxmemory with 2 MiB values grew the data directory to 6 GB in 36 s. The rewrite now counts the
arena bytes the log references, and the snapshot's reclaim punches out dead ranges of the arena
being written too: disk use is about twice the data's on-disk size plus auto-aof-rewrite-min-size
(docs/durability.md)."""

from __future__ import annotations

import os
import random

import redis

from tests.recovery.helpers import DirServer, wait_for

VALUE = 100 * 1024
MIN_SIZE = 4 * 1024 * 1024


def disk_bytes(path) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            total += os.stat(os.path.join(root, name)).st_blocks * 512
    return total


def test_overwritten_and_evicted_big_values_do_not_grow_the_disk_without_bound(tmp_path):
    node = DirServer(tmp_path / "data", maxmemory=2 * 1024 * 1024, maxmemory_policy="allkeys-lru",
                     blob_threshold=64 * 1024, auto_aof_rewrite_min_size=MIN_SIZE, save="").start()
    try:
        r = redis.Redis(port=node.port, socket_timeout=30)
        rng = random.Random(5)
        peak = 0
        for i in range(600):  # 60 MB written into a 2 MB dataset
            r.set(f"k{rng.randrange(60)}", os.urandom(16) * (VALUE // 16))
            if i % 50 == 49:
                peak = max(peak, disk_bytes(tmp_path / "data"))
        wait_for(lambda: r.info("persistence")["aof_rewrite_in_progress"] == 0, timeout=30)
        info = r.info("persistence")
        assert info["aof_rewrites"] >= 3
        live = info["pion_snapshot_bytes"] + info["pion_arena_snapshot_bytes"]
        assert live < 6 * 1024 * 1024
        assert peak < 2 * live + MIN_SIZE + 8 * 1024 * 1024, (peak, live)  # 60 MB on main
    finally:
        node.stop()
