"""Fixtures of the storage unit tests: ``store``, a blob arena store of 1 MiB arenas in a temp dir."""

from __future__ import annotations

import pytest

from pion.storage.arena import ArenaStore


@pytest.fixture
def store(tmp_path):
    s = ArenaStore(str(tmp_path / "arenas"), arena_size=1 << 20)
    yield s
    s.close()
