"""FlowControl without sockets: reading pauses on the first reason and resumes after the last,
telling the transport on transitions only (uvicorn's MockTransport style)."""

from __future__ import annotations

from pion.server.net.flow_control import HELD, READ_AHEAD, WRITES, FlowControl


class FakeTransport:
    def __init__(self) -> None:
        self.calls: list[str] = []
        self.closing = False

    def pause_reading(self) -> None:
        self.calls.append("pause")

    def resume_reading(self) -> None:
        self.calls.append("resume")

    def is_closing(self) -> bool:
        return self.closing


def test_reading_resumes_only_when_every_reason_is_gone():
    transport = FakeTransport()
    flow = FlowControl(transport)
    assert flow.reading
    flow.pause(WRITES)
    flow.pause(HELD)  # a second reason: the transport is already paused
    assert transport.calls == ["pause"] and flow.is_paused(WRITES) and flow.is_paused(HELD)
    flow.resume(WRITES)
    assert transport.calls == ["pause"] and not flow.reading  # still held
    flow.resume(HELD)
    assert transport.calls == ["pause", "resume"] and flow.reading


def test_pause_and_resume_are_idempotent_and_order_free():
    transport = FakeTransport()
    flow = FlowControl(transport)
    flow.resume(READ_AHEAD)  # never paused: nothing happens
    flow.pause(READ_AHEAD)
    flow.pause(READ_AHEAD)
    flow.resume(READ_AHEAD)
    flow.resume(READ_AHEAD)
    assert transport.calls == ["pause", "resume"]


def test_a_closing_or_missing_transport_is_not_touched():
    flow = FlowControl()
    flow.pause(WRITES)  # before connection_made
    assert not flow.reading
    transport = FakeTransport()
    flow.transport = transport
    transport.closing = True
    flow.resume(WRITES)
    assert transport.calls == [] and flow.reading
