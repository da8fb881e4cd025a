"""The PION.STATS ledger's crediting rules, SSM blobs and STATE buffers."""

from __future__ import annotations

import pytest

from pion.kvcache.ssm import SSMStore
from pion.kvcache.state import StateStore
from pion.kvcache.stats import Ledger, seconds_text
from pion.protocol.errors import ReplyError


def test_ledger_credits_measured_time_exactly_and_estimates_the_rest():
    ledger = Ledger()
    for _ in range(3):
        ledger.hit(2000, 1_200_000)
    fields = ledger.fields(7)
    assert fields[b"prefill_seconds_avoided"] == b"3.600"
    ledger.hit(100, None)  # 100 tokens x 555 us
    fields = ledger.fields(7)
    assert fields[b"prefill_seconds_avoided"] == b"3.655"
    assert fields[b"prefill_seconds_avoided_measured"] == b"3.600"
    assert fields[b"kvprefix_hits"] == 4 and fields[b"kvprefix_hits_measured"] == 3
    assert list(fields)[:3] == [b"worker_id", b"uptime_in_seconds", b"kvprefix_hits"]
    assert len(fields) == 16
    ledger.reset()
    assert ledger.fields(7)[b"kvprefix_hits"] == 0 and ledger.fields(7)[b"uptime_in_seconds"] == 7


def test_seconds_text_truncates_to_milliseconds():
    assert seconds_text(0) == b"0.000" and seconds_text(1_999_999) == b"1.999"


def test_ssm_store_replace_fetch_drop_and_bytes():
    ssm = SSMStore()
    ssm.store(b"s", 0, b"abc")
    ssm.store(b"s", 0, b"abcdef")
    ssm.store(b"s", 3, b"zz")
    assert ssm.fetch(b"s", 0) == b"abcdef" and ssm.fetch(b"s", 1) is None and ssm.nbytes == 8
    assert ssm.drop(b"s", 0) and not ssm.drop(b"s", 0)
    assert ssm.drop(b"s") and ssm.nbytes == 0 and not ssm.drop(b"s")


def test_state_fixed_buffers_refuse_out_of_range():
    state = StateStore()
    state.alloc(b"s", 8, "fixed")
    with pytest.raises(ReplyError, match="already allocated"):
        state.alloc(b"s", 8, "fixed")
    assert state.write(b"s", 2, b"abc") == 3
    assert state.read(b"s", 0, 8) == b"\0\0abc\0\0\0"
    with pytest.raises(ReplyError, match="exceeds size 8"):
        state.write(b"s", 6, b"abc")
    with pytest.raises(ReplyError, match="empty payload"):
        state.write(b"s", 0, b"")
    with pytest.raises(ReplyError, match="no such buffer"):
        state.read(b"t", 0, 1)
    assert state.free(b"s") and not state.free(b"s") and state.nbytes == 0


def test_state_ring_buffers_wrap():
    state = StateStore()
    state.alloc(b"r", 5, "ring")
    state.write(b"r", 3, b"abcd")  # 'ab' at 3..4, 'cd' at 0..1
    assert state.read(b"r", 0, 5) == b"cd\0ab"
    assert state.read(b"r", 8, 4) == b"abcd"
    with pytest.raises(ReplyError, match="exceeds ring size"):
        state.write(b"r", 0, b"123456")
