"""The query budget (``pion.storage.budget``): ticks read the clock every EVERY items, a passed
deadline raises QueryTimeout with RediSearch's text, no deadline never raises."""

from __future__ import annotations

import time

import pytest

from pion.storage import budget
from pion.storage.budget import UNLIMITED, Budget, QueryTimeout, timeout_ms


def test_unlimited_never_raises():
    for _ in range(10 * budget.EVERY):
        UNLIMITED.tick()
    UNLIMITED.check()
    assert not Budget(0).limited and Budget(0).left() == float("inf")


def test_deadline_raises_on_the_next_clock_read():
    b = Budget(1)
    time.sleep(0.005)
    for _ in range(budget.EVERY - 1):
        b.tick()  # below EVERY items the clock is not read
    assert not b.expired
    with pytest.raises(QueryTimeout) as info:
        b.tick()
    assert info.value.message == "Timeout limit was reached" and b.expired


def test_weighted_ticks_read_the_clock_sooner():
    b = Budget(1)
    time.sleep(0.005)
    with pytest.raises(QueryTimeout):
        b.tick(budget.EVERY)


def test_timeout_ms_from_config():
    assert timeout_ms(None) == 500
    assert timeout_ms({"TIMEOUT": "0"}) == 0
    assert timeout_ms({"TIMEOUT": "42"}) == 42
    assert timeout_ms({"TIMEOUT": "x"}) == 500


def test_pause_hook_runs_at_each_clock_read_and_the_turn_counts(monkeypatch):
    """The server's pause hook (``set_pause``) is called at every clock read of a budget made
    after it was set, also without a deadline; a turn it gave away counts against the deadline."""
    calls = []

    def pause() -> bool:
        calls.append(1)
        time.sleep(0.005)  # the loop served others meanwhile
        return True

    monkeypatch.setattr(budget, "_pause", None)
    budget.set_pause(pause)
    try:
        free = Budget(0)
        for _ in range(3 * budget.EVERY):
            free.tick()
        assert len(calls) == 3 and not free.expired  # no deadline: paused, never raises
        tight = Budget(2)
        with pytest.raises(QueryTimeout):
            tight.tick(budget.EVERY)  # before the pause the deadline had not passed; after it, it has
        assert tight.expired
        assert UNLIMITED.pause is None  # replay's budget never pauses
    finally:
        budget.set_pause(None)
    assert Budget(0).pause is None


def test_breathe_pauses_but_never_raises(monkeypatch):
    calls = []
    monkeypatch.setattr(budget, "_pause", None)
    budget.set_pause(lambda: calls.append(1) or True)
    try:
        b = Budget(1)
        time.sleep(0.005)
        for _ in range(2 * budget.EVERY):
            b.breathe()  # past the deadline, yet no QueryTimeout: the caller checks later
        assert len(calls) == 2 and not b.expired
    finally:
        budget.set_pause(None)
