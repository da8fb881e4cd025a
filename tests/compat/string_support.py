"""Fixtures and helpers shared by the string and bitmap compat tests.

Fixtures are declared under their pytest names (``name=``) so test modules can import them
without their parameters shadowing the import.
"""

from __future__ import annotations

import pytest
import redis


class NotAString:
    """A value of another type, injected directly so these tests need no other family."""


@pytest.fixture(name="wrongtype")
def wrongtype_fixture(server):
    """Store a non-string value under ``key`` in db 0."""

    def put(key: bytes = b"wt") -> bytes:
        server.call(server.server.dbs[0].set, key, NotAString())
        return key

    return put


@pytest.fixture(name="effects")
def effects_fixture(server):
    """What the dispatcher hands to the journal: a list of (db, argv), in order."""
    log: list[tuple[int, list[bytes]]] = []
    journal = server.server.journal
    original = journal.append

    def append(records):
        log.extend(records)
        return original(records)

    server.call(setattr, journal, "append", append)
    return log


@pytest.fixture(name="events")
def events_fixture(make_server):
    """A server with every keyspace event on; returns (server, list of (type, event, key))."""
    srv = make_server(notify_keyspace_events="KEA")
    seen: list[tuple[str, str, bytes]] = []
    hub = srv.server.pubsub
    original = hub.notify_keyspace_event

    def record(event_type, event, key, db_index):
        seen.append((event_type, event, key))
        return original(event_type, event, key, db_index)

    srv.call(setattr, hub, "notify_keyspace_event", record)
    return srv, seen


def error_of(call, *args, **kwargs) -> str:
    with pytest.raises(redis.ResponseError) as exc:
        call(*args, **kwargs)
    return str(exc.value)


def argvs(log) -> list[list[bytes]]:
    return [argv for _, argv in log]
