"""What a worker remembers across restarts on this host: the prefix sizes each model served.

Why: a fresh worker's first hit zero-fills the pages of the cache tensors the runtime builds
(``pion.client.allocator``), unless it prefaults that much heap at start. ``warm_up_tokens``
asks the user for the size; this file remembers it instead: every hit and store records the
largest prefix (in tokens) a model with this layout and codec schema has served, and the next
``PionPromptCache`` of that model prefaults that much at construction. It is a size hint only,
never part of a cache decision: a stale or lost file costs memory touched or a slower first
hit, never a wrong answer, so failing to read or write it is not an error.

The file is ``$XDG_CACHE_HOME/pion/workers.json`` (``~/.cache/pion`` without the variable),
written whole (temporary file, then rename) under an ``flock``, so concurrent workers never
leave it half-written.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

FILE_NAME = "workers.json"


def cache_dir() -> Path:
    """The user's cache directory for Pion (``$XDG_CACHE_HOME/pion`` or ``~/.cache/pion``)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "pion"


def _read(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def seen_tokens(key: str) -> int:
    """The largest prefix (tokens) a worker of this model ``key`` has served here; 0 if none."""
    value = _read(cache_dir() / FILE_NAME).get("seen", {}).get(key, 0)
    return value if isinstance(value, int) and value > 0 else 0


@contextlib.contextmanager
def _locked(directory: Path, name: str):
    import fcntl

    with open(directory / (name + ".lock"), "a+b") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def update(name: str, change) -> bool:
    """Apply ``change(data)`` to the JSON file ``name`` in the cache dir, whole, under its lock;
    False when the directory cannot be written (the hint is lost, nothing else)."""
    directory = cache_dir()
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with _locked(directory, name):
            path = directory / name
            data = _read(path)
            if change(data) is False:
                return False
            tmp = path.with_name(f".{name}.{os.getpid()}")
            tmp.write_text(json.dumps(data, sort_keys=True))
            os.replace(tmp, path)
            return True
    except OSError:  # a read-only or full home
        return False


def record_seen(key: str, n_tokens: int) -> bool:
    """Remember that model ``key`` served a prefix of ``n_tokens``; True if it raised the record."""

    def change(data: dict):
        seen = data.setdefault("seen", {})
        if not isinstance(seen, dict) or seen.get(key, 0) >= n_tokens:
            return False
        seen[key] = int(n_tokens)
        return True

    return update(FILE_NAME, change)
