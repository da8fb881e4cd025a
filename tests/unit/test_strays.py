"""The session's stray-process check finds a process by the marker it inherited, even one whose
parent is gone, and kills it."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.support import strays


def test_a_marked_orphan_is_found_and_killed():
    token = "test-" + os.urandom(4).hex()
    env = dict(os.environ, **{strays.MARKER: token})
    # the child starts a grandchild and exits: the grandchild is re-parented to init
    launcher = "import subprocess, sys; p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL); print(p.pid)"
    out = subprocess.run([sys.executable, "-c", launcher], env=env, capture_output=True, text=True, check=True)
    orphan = int(out.stdout.strip())
    try:
        found = strays.strays(token, grace=0.5)
        assert orphan in found and "time.sleep(60)" in found[orphan]
    finally:
        strays.kill({orphan: ""})
    assert strays.strays(token, grace=5.0) == {}


def test_unmarked_processes_are_not_counted():
    assert strays.strays("no-such-session-" + os.urandom(4).hex(), grace=0) == {}


def test_a_script_past_its_timeout_is_stopped_with_everything_it_started():
    import pytest

    from tests.support import procs

    token = "test-" + os.urandom(4).hex()
    env = dict(os.environ, **{strays.MARKER: token})
    script = ("import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']);"
              " time.sleep(60)")
    with pytest.raises(subprocess.TimeoutExpired):
        procs.run([sys.executable, "-c", script], timeout=1.0, env=env)
    assert strays.strays(token, grace=5.0) == {}
