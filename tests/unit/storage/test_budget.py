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
