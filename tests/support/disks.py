"""Small real disks for full-disk tests: a tmpfs of a few MiB mounted for one test (root only;
tests skip with the reason where mounting is not allowed), and a filler file that takes all but
a chosen number of its bytes."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


@contextlib.contextmanager
def tmpfs(path: Path, size: str = "64m") -> Iterator[Path]:
    """Mount a tmpfs of ``size`` at ``path`` for the block; ``pytest.skip`` if that is not allowed."""
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root (full-disk test)")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "none", str(path)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip() or done.returncode}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


class Filler:
    """A file that fills a disk (``fill``) and gives room back (``free``, ``leave``)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def fill(self) -> int:
        """Write until the disk is full; returns the bytes written."""
        written = self.path.stat().st_size if self.path.exists() else 0
        block = b"\0" * (1 << 16)
        with open(self.path, "ab", buffering=0) as handle:
            while True:
                try:
                    written += handle.write(block)
                except OSError:
                    break
        # the last partial block may have been taken by the kernel: fill the rest byte-exactly
        with open(self.path, "ab", buffering=0) as handle:
            for size in (4096, 512, 1):
                while True:
                    try:
                        written += handle.write(b"\0" * size)
                    except OSError:
                        break
        return written

    def leave(self, free_bytes: int) -> None:
        """Fill the disk, then give back ``free_bytes`` (a nearly full disk)."""
        self.fill()
        size = self.path.stat().st_size
        os.truncate(self.path, max(0, size - free_bytes))

    def free(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
