"""FT.* and JSON.* against Redis Stack (RediSearch 2.10.5, RedisJSON 2.8.3): every case of
``stack_diff.py`` sent to both servers in RESP2 and RESP3, each reply compared after the allowed
normalisations. A difference listed in ``stack_differences.py`` skips with its reason; an unlisted
one fails, and so does a listed one that no longer differs."""

from __future__ import annotations

import os

import pytest

from tests.search.stack_diff import cases, client, run_case, show
from tests.search.stack_differences import listed
from tests.support.stack import StackServer

pytestmark = pytest.mark.stack

CASES = cases()


@pytest.fixture(scope="module")
def pion_port(tmp_path_factory):
    from tests.support.servers import ThreadServer, make_settings

    srv = ThreadServer(make_settings(tmp_path_factory.mktemp("pion"))).start()
    try:
        yield srv.port
    finally:
        srv.stop()


@pytest.fixture(scope="module")
def stack_port(tmp_path_factory):
    why = StackServer.missing()
    if why is not None:
        if os.environ.get("CI"):  # make test installs it: in CI its absence is a failure, not a skip
            pytest.fail(f"Redis Stack is missing in CI: {why}")
        pytest.skip(why)
    srv = StackServer(tmp_path_factory.mktemp("stack"))
    try:
        srv.start()
        yield srv.port
    finally:
        srv.stop()


@pytest.mark.parametrize("protocol", [2, 3], ids=["resp2", "resp3"])
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_same_replies(case, protocol, pion_port, stack_port):
    ours, theirs = client(pion_port, protocol), client(stack_port, protocol)
    try:
        results = run_case(case, ours, theirs)
    finally:
        ours.close()
        theirs.close()
    unlisted: list[str] = []
    stale: list[str] = []
    listed_steps: dict[str, list[str]] = {}  # reason -> the steps it covers
    for res in results:
        if case.steps[res.index].setup and not res.same:
            unlisted.append(f"setup step {res.index} {show(res.args)}: pion {res.ours!r}, stack {res.theirs!r}")
            continue
        why = listed(case.name, res.args, protocol)
        if res.same and why is not None:
            stale.append(f"step {res.index} {show(res.args)} is listed ({why[:50]}...) but no longer differs")
        elif not res.same and why is None:
            unlisted.append(f"step {res.index} {show(res.args)}\n  pion:  {res.ours!r}\n  stack: {res.theirs!r}")
        elif not res.same:
            listed_steps.setdefault(why, []).append(show(res.args)[:60])
    assert not unlisted and not stale, "\n".join(unlisted + stale)
    if listed_steps:
        pytest.skip("listed differences: " + "; ".join(f"{why} [{', '.join(steps)}]"
                                                        for why, steps in listed_steps.items()))
