"""What a dead server leaves behind: the crash log line, the status file, the lock."""

from __future__ import annotations

import signal
import time

import pytest
import redis

from tests.support.servers import ProcessServer


def crash_log(datadir) -> str:
    path = datadir / "pion.crash.log"
    return path.read_text() if path.exists() else ""


def wait_exit(server: ProcessServer, timeout: float = 20.0) -> int:
    return server.proc.wait(timeout)


def test_a_panic_writes_time_cause_and_last_command(tmp_path):
    server = ProcessServer(tmp_path / "d", "--enable-debug-command", "yes").start()
    r = redis.Redis(port=server.port)
    r.set("k", "v")
    try:
        r.execute_command("DEBUG", "PANIC")
    except redis.exceptions.ConnectionError:
        pass
    assert wait_exit(server) != 0
    text = crash_log(tmp_path / "d")
    line = next(line for line in text.splitlines() if "PION CRASH" in line)
    assert "panic: DEBUG PANIC" in line and "command=debug|panic" in line and "last_command=set" in line
    assert line[:4].isdigit()  # the time


def test_a_segfault_leaves_a_traceback_in_the_crash_log(tmp_path):
    server = ProcessServer(tmp_path / "d", "--enable-debug-command", "yes").start()
    try:
        redis.Redis(port=server.port).execute_command("DEBUG", "SEGFAULT")
    except redis.exceptions.ConnectionError:
        pass
    assert wait_exit(server) == -signal.SIGSEGV
    assert "Segmentation fault" in crash_log(tmp_path / "d")


def test_a_fatal_signal_is_logged_and_keeps_its_exit_status(tmp_path):
    server = ProcessServer(tmp_path / "d").start()
    server.proc.send_signal(signal.SIGHUP)
    assert wait_exit(server) == -signal.SIGHUP
    assert "PION CRASH: signal SIGHUP (1)" in crash_log(tmp_path / "d")


def test_a_clean_stop_and_a_kill_leave_different_traces(tmp_path):
    datadir = tmp_path / "d"
    server = ProcessServer(datadir).start()
    redis.Redis(port=server.port).set("k", "v")
    assert server.stop() == 0
    assert "PION EXIT: clean shutdown" in crash_log(datadir)
    assert "state=stopped" in (datadir / "pion.status").read_text()
    server.start()
    time.sleep(1.2)  # one status tick
    server.kill9()
    status = dict(line.split("=", 1) for line in (datadir / "pion.status").read_text().splitlines())
    assert status["state"] == "running" and int(status["keys"]) == 1  # what a SIGKILL/OOM kill leaves
    assert int(status["rss_bytes"]) > 0 and "rss_pct" in status
    assert crash_log(datadir).count("PION START") == 2
    server.start()  # the lock of a killed server is gone with it
    assert redis.Redis(port=server.port).get("k") == b"v"
    server.stop()


def status_of(datadir, name: str = "pion.status", want: str | None = None, timeout: float = 10.0) -> dict:
    """The status file's fields; with ``want``, waits until ``state`` is that (the fault watcher
    writes a moment after the server died)."""
    deadline = time.time() + timeout
    while True:
        path = datadir / name
        fields = dict(line.split("=", 1) for line in path.read_text().splitlines()) if path.exists() else {}
        if want is None or fields.get("state") == want or time.time() > deadline:
            return fields
        time.sleep(0.05)


@pytest.mark.parametrize(("how", "signame"), [("segfault", "SIGSEGV"), ("panic", "SIGABRT"), ("hup", "SIGHUP")])
def test_the_status_file_records_the_fatal_signal(tmp_path, how, signame):
    """Issue 12, defect 8: after SIGSEGV, SIGABRT or SIGHUP the status file said state=running."""
    server = ProcessServer(tmp_path / "d", "--enable-debug-command", "yes").start()
    time.sleep(1.2)  # one status tick as running
    if how == "hup":
        server.proc.send_signal(signal.SIGHUP)
    else:
        try:
            redis.Redis(port=server.port).execute_command("DEBUG", how.upper())
        except redis.exceptions.ConnectionError:
            pass
    assert wait_exit(server) == -getattr(signal, signame)
    status = status_of(tmp_path / "d", want="crashed")
    assert status["state"] == "crashed" and status["signal_name"] == signame
    assert int(status["signal"]) == getattr(signal, signame) and int(status["exit_unix_s"]) > 0
    assert f"PION CRASH: signal {signame}" in crash_log(tmp_path / "d")


def test_breadcrumb_paths_and_switch_do_what_they_say(tmp_path):
    """Issue 12, defect 7: --crash-log and --status-file were accepted and ignored."""
    logs = tmp_path / "logs"
    logs.mkdir()
    server = ProcessServer(tmp_path / "d", "--crash-log", str(logs / "c.log"), "--status-file",
                           str(logs / "s.status")).start()
    assert server.stop() == 0
    assert "PION START" in (logs / "c.log").read_text() and status_of(logs, "s.status")["state"] == "stopped"
    assert not (tmp_path / "d" / "pion.status").exists() and not (tmp_path / "d" / "pion.crash.log").exists()
    quiet = ProcessServer(tmp_path / "q", "--no-crash-log").start()
    assert quiet.stop() == 0
    assert not (tmp_path / "q" / "pion.status").exists() and not (tmp_path / "q" / "pion.crash.log").exists()
