"""The syscall-level fault injector (``pion.storage.faults.arm_syscall``): it counts and fails
only file operations under its root, the k-th call exactly, once or until disarmed, from any
thread, and leaves the real ``os`` functions in place when nothing is armed."""

from __future__ import annotations

import builtins
import errno
import os
import socket
import threading

import pytest

from pion.storage import faults

REAL_PWRITE = os.pwrite
REAL_OPEN = builtins.open


@pytest.fixture(autouse=True)
def _off():
    yield
    faults.disarm_syscall()


def test_nothing_is_wrapped_unless_armed(tmp_path):
    assert os.pwrite is REAL_PWRITE and builtins.open is REAL_OPEN
    faults.watch_syscalls(str(tmp_path))
    assert os.pwrite is not REAL_PWRITE and builtins.open is not REAL_OPEN
    faults.disarm_syscall()
    assert os.pwrite is REAL_PWRITE and builtins.open is REAL_OPEN and os.fsync.__module__ in ("posix", "os")


def test_counts_only_files_under_the_root(tmp_path):
    root, other = tmp_path / "data", tmp_path / "elsewhere"
    root.mkdir()
    other.mkdir()
    faults.watch_syscalls(str(root))
    for where in (root, other):
        fd = os.open(where / "f", os.O_WRONLY | os.O_CREAT, 0o644)
        os.write(fd, b"ab")
        os.pwrite(fd, b"cd", 2)
        os.fsync(fd)
        os.fdatasync(fd)
        os.ftruncate(fd, 1)
        os.close(fd)
        os.rename(where / "f", where / "g")
        os.replace(where / "g", where / "h")
        os.unlink(where / "h")
    with open(root / "r", "w") as handle:  # open for writing and its (buffered) writes
        handle.write("x")
    with open(root / "r") as handle:  # reading: not counted
        assert handle.read() == "x"
    a, b = socket.socketpair()
    os.write(a.fileno(), b"not a file")  # a socket: not counted
    a.close()
    b.close()
    assert faults.syscall_counts() == {"open": 2, "write": 2, "pwrite": 1, "fsync": 2, "ftruncate": 1,
                                       "rename": 2, "unlink": 1, "injected": 0}


def test_a_rename_into_the_root_counts(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "src").write_bytes(b"x")
    faults.watch_syscalls(str(tmp_path / "data"))
    os.replace(tmp_path / "src", tmp_path / "data" / "dst")
    assert faults.syscall_counts()["rename"] == 1


@pytest.mark.parametrize("name,code", [("ENOSPC", errno.ENOSPC), ("EIO", errno.EIO)])
def test_the_nth_call_fails_once(tmp_path, name, code):
    fd = os.open(tmp_path / "f", os.O_WRONLY | os.O_CREAT, 0o644)
    faults.arm_syscall("pwrite", 3, name, root=str(tmp_path))
    results = []
    for i in range(5):
        try:
            os.pwrite(fd, b"%d" % i, i)
            results.append("ok")
        except OSError as exc:
            results.append(exc.errno)
    os.close(fd)
    assert results == ["ok", "ok", code, "ok", "ok"]
    assert (tmp_path / "f").read_bytes() == b"01\x0034"  # the failed call wrote nothing
    assert faults.syscall_counts()["injected"] == 1 and faults.syscall_counts()["pwrite"] == 5


def test_sticky_fails_from_the_nth_call_until_disarmed(tmp_path):
    fd = os.open(tmp_path / "f", os.O_WRONLY | os.O_CREAT, 0o644)
    faults.arm_syscall("fsync", 2, "EIO", sticky=True, root=str(tmp_path))
    os.fsync(fd)
    for _ in range(3):
        with pytest.raises(OSError) as info:
            os.fdatasync(fd)
        assert info.value.errno == errno.EIO and "injected" in str(info.value)
    faults.disarm_syscall()
    os.fsync(fd)
    os.close(fd)
    assert faults.syscall_counts()["injected"] == 3


def test_open_for_writing_fails_with_the_path(tmp_path):
    faults.arm_syscall("open", 1, "ENOSPC", root=str(tmp_path))
    with pytest.raises(OSError) as info:
        open(tmp_path / "snap.tmp", "wb")
    assert info.value.errno == errno.ENOSPC and info.value.filename == str(tmp_path / "snap.tmp")
    assert not (tmp_path / "snap.tmp").exists()
    with open(tmp_path / "snap.tmp", "wb") as handle:  # once: the next open works
        handle.write(b"x")


def test_buffered_writes_fail_at_the_flush(tmp_path):
    faults.arm_syscall("write", 1, "EIO", root=str(tmp_path))
    handle = open(tmp_path / "f", "wb", buffering=1024)
    handle.write(b"x" * 100)  # buffered: nothing reaches the file yet
    with pytest.raises(OSError) as info:
        handle.flush()
    assert info.value.errno == errno.EIO
    handle.close()
    assert faults.syscall_counts()["write"] >= 1


def test_other_threads_are_counted_and_failed(tmp_path):
    fd = os.open(tmp_path / "f", os.O_WRONLY | os.O_CREAT, 0o644)
    faults.arm_syscall("write", 2, "ENOSPC", root=str(tmp_path))
    seen: list = []

    def writer() -> None:
        for _ in range(3):
            try:
                os.write(fd, b"x")
                seen.append("ok")
            except OSError as exc:
                seen.append(exc.errno)

    thread = threading.Thread(target=writer)
    thread.start()
    thread.join()
    os.close(fd)
    assert seen == ["ok", errno.ENOSPC, "ok"]


def test_bad_arguments_are_refused(tmp_path):
    with pytest.raises(ValueError, match="unknown operation"):
        faults.arm_syscall("chmod", 1, "EIO", root=str(tmp_path))
    with pytest.raises(ValueError, match="counts from 1"):
        faults.arm_syscall("write", 0, "EIO", root=str(tmp_path))
    with pytest.raises(ValueError, match="unknown errno"):
        faults.arm_syscall("write", 1, "EWHAT", root=str(tmp_path))
    assert os.pwrite is REAL_PWRITE and faults.syscall_faults() == {}


def test_a_second_fault_counts_from_when_it_is_added(tmp_path):
    fd = os.open(tmp_path / "f", os.O_WRONLY | os.O_CREAT, 0o644)
    faults.arm_syscall("pwrite", 2, "ENOSPC", root=str(tmp_path))
    os.ftruncate(fd, 0)  # ftruncate call 1, before the second fault is added
    faults.arm_syscall("ftruncate", 1, "EIO", root=str(tmp_path), also=True)
    os.pwrite(fd, b"a", 0)
    with pytest.raises(OSError) as info:
        os.pwrite(fd, b"b", 1)
    assert info.value.errno == errno.ENOSPC
    with pytest.raises(OSError) as info:
        os.ftruncate(fd, 1)  # the first ftruncate after it was added
    assert info.value.errno == errno.EIO
    os.ftruncate(fd, 1)
    os.close(fd)
    assert faults.syscall_counts()["injected"] == 2 and set(faults.syscall_faults()) == {"pwrite", "ftruncate"}


def test_a_second_fault_needs_a_first(tmp_path):
    with pytest.raises(ValueError, match="nothing is armed"):
        faults.arm_syscall("ftruncate", 1, "EIO", root=str(tmp_path), also=True)
