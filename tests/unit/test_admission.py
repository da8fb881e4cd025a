"""Admission without a server: when several refusals apply, the first in Redis's processCommand
order wins (NOAUTH, no_multi, ACL, OOM, MISCONF, RESP2 subscribed, LOADING, BUSY)."""

from __future__ import annotations

from types import SimpleNamespace

from pion.protocol import errors
from pion.protocol.errors import ReplyError
from pion.server.admission import Admission


def spec(name: str = "set", flags: str = "write denyoom") -> SimpleNamespace:
    return SimpleNamespace(name=name, full_name=name, flags=frozenset(flags.split()))


def client(**overrides) -> SimpleNamespace:
    base = {"authenticated": True, "multi": None, "proto": 3, "subscription_count": 0}
    return SimpleNamespace(**{**base, **overrides})


class Refuser:
    """A part that refuses with ``text`` (or not at all) and records that it was asked."""

    def __init__(self, text: str | None) -> None:
        self.text, self.asked = text, 0

    def refusal(self, client, spec, argv):  # security
        self.asked += 1
        return ReplyError(self.text) if self.text else None

    def check(self, flags):  # memory
        self.asked += 1
        return ReplyError(self.text) if self.text and "denyoom" in flags else None

    def write_refusal(self, name, flags):  # durability
        self.asked += 1
        return ReplyError(self.text) if self.text and ("write" in flags or name == "ping") else None


def admission(loading=False, busy=None, security=None, memory=None, durability=None) -> Admission:
    server = SimpleNamespace(loading=loading, dispatcher=SimpleNamespace(busy=busy))
    gate = Admission(server)
    gate.security, gate.memory, gate.durability = security, memory, durability
    return gate


def busy(client, spec, argv):
    return ReplyError("BUSY a script is running")


def every_refusal(**overrides) -> Admission:
    parts = {"security": Refuser("NOPERM no"), "memory": Refuser(errors.OOM), "durability": Refuser(errors.MISCONF)}
    return admission(loading=True, busy=busy, **{**parts, **overrides})


def message(gate: Admission, who=None, what=None) -> str | None:
    refusal = gate.refusal(who or client(), what or spec(), [b"SET", b"k", b"v"])
    return None if refusal is None else refusal.message.split(" ", 1)[0]


def test_the_first_refusal_in_redis_order_wins():
    assert message(every_refusal(), client(authenticated=False)) == "NOAUTH"
    assert message(every_refusal(), client(multi=[]), spec("watch", "no_multi")) == "ERR"
    assert message(every_refusal()) == "NOPERM"
    assert message(every_refusal(security=Refuser(None))) == "OOM"
    assert message(every_refusal(security=Refuser(None), memory=Refuser(None))) == "MISCONF"
    quiet = {"security": Refuser(None), "memory": Refuser(None), "durability": Refuser(None)}
    assert message(every_refusal(**quiet), client(proto=2, subscription_count=1)) == "ERR"
    assert message(every_refusal(**quiet)) == "LOADING"
    assert message(admission(busy=busy, **quiet)) == "BUSY"
    assert message(admission(**quiet)) is None


def test_no_auth_and_loading_flags_let_a_command_through():
    gate = admission(loading=True)
    assert message(gate, client(authenticated=False), spec("auth", "no_auth loading fast")) is None


def test_exec_is_admitted_as_what_it_queued():
    memory = Refuser(errors.OOM)
    gate = admission(memory=memory, durability=Refuser(None))
    queued = [(spec("set", "write denyoom"), [b"SET", b"k", b"v"])]
    assert message(gate, client(multi=queued), spec("exec", "noscript loading")) == "OOM"
    assert message(gate, client(multi=[]), spec("exec", "noscript loading")) is None


def test_command_refusal_asks_security_memory_durability_only():
    security, memory, durability = Refuser(None), Refuser(None), Refuser(errors.MISCONF)
    gate = admission(loading=True, busy=busy, security=security, memory=memory, durability=durability)
    refusal = gate.command_refusal(client(), spec(), [b"SET", b"k", b"v"])
    assert refusal.message.startswith("MISCONF")  # not LOADING or BUSY: EXEC and scripts ask this
    assert (security.asked, memory.asked, durability.asked) == (1, 1, 1)
    assert gate.command_refusal(client(), spec("get", "readonly fast"), [b"GET", b"k"]) is None
