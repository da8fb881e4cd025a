"""Run a script (a benchmark's smoke mode, an example) as a test would, without leaving anything
behind on a timeout: the script runs in its own session (process group); past the timeout it
gets SIGTERM (its ``finally`` blocks stop the servers it started: ``ProcessServer`` turns SIGTERM
into SystemExit), and after a grace period the whole group gets SIGKILL."""

from __future__ import annotations

import os
import signal
import subprocess
from typing import Any

GRACE_SECONDS = 20.0


def run(cmd: list[str], timeout: float, **kwargs: Any) -> subprocess.CompletedProcess:
    """``subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kwargs)``, except
    that a timeout also ends every process the script started."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, **kwargs)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=GRACE_SECONDS)
        except subprocess.TimeoutExpired:
            pass
        _kill_group(proc.pid)  # what it started and did not stop (their pipes close with them)
        out, err = proc.communicate()
        raise subprocess.TimeoutExpired(cmd, timeout, output=out, stderr=err) from None
    except BaseException:
        _kill_group(proc.pid)
        proc.wait()
        raise
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except OSError:
        pass
