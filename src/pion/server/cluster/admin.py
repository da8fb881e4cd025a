"""CLUSTER <subcommand> on a cluster node: topology reads, slot assignment, resharding
(SETSLOT IMPORTING/MIGRATING/NODE/STABLE), MEET/FORGET/RESET, with Redis 7.0's replies and
error texts. Changes are saved to the config file before the reply."""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pion.protocol import errors
from pion.protocol.errors import ReplyError
from pion.protocol.keyslot import SLOTS, key_slot
from pion.protocol.resp import OK, Verbatim
from pion.server.cluster import replies
from pion.server.cluster.state import Node, new_node_id

if TYPE_CHECKING:
    from pion.server.cluster import ClusterEngine
    from pion.server.context import Ctx

UNSUPPORTED = ("ERR CLUSTER {} is not supported: Pion cluster nodes are all masters, with no replicas, "
               "no cluster bus and no automatic failover (docs/scale-out.md)")
HELP = [
    "CLUSTER <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "ADDSLOTS <slot> [<slot> ...]", "ADDSLOTSRANGE <start slot> <end slot> [<start slot> <end slot> ...]",
    "COUNTKEYSINSLOT <slot>", "DELSLOTS <slot> [<slot> ...]", "DELSLOTSRANGE <start slot> <end slot> [...]",
    "FLUSHSLOTS", "FORGET <node-id>", "GETKEYSINSLOT <slot> <count>", "INFO", "KEYSLOT <key>",
    "MEET <ip> <port> [<bus-port>]", "MYID", "NODES", "RESET [HARD|SOFT]", "SAVECONFIG",
    "SETSLOT <slot> (IMPORTING <node-id>|MIGRATING <node-id>|STABLE|NODE <node-id>)", "SHARDS", "SLOTS",
    "FAILOVER, REPLICATE: not supported (no replicas, no failover; docs/scale-out.md)",
    "HELP", "    Print this help.",
]


def _int(raw: bytes) -> int:
    try:
        return int(raw)
    except ValueError:
        raise ReplyError(errors.NOT_INTEGER) from None


def _slot(raw: bytes) -> int:
    try:
        slot = int(raw)
    except ValueError:
        slot = -1
    if not 0 <= slot < SLOTS:
        raise ReplyError("ERR Invalid or out of range slot")
    return slot


def _node(engine: ClusterEngine, raw: bytes, message: str = "ERR I don't know about node {}") -> Node:
    node = engine.state.find(raw.decode("latin-1"))
    if node is None:
        raise ReplyError(message.format(raw.decode("latin-1")))
    return node


def _ranges(argv: list[bytes], name: str) -> list[int]:
    if len(argv) % 2:
        raise ReplyError(errors.wrong_arity(f"cluster|{name}"))
    slots: list[int] = []
    for a, b in zip(argv[2::2], argv[3::2], strict=True):
        start, end = _slot(a), _slot(b)
        if start > end:
            raise ReplyError(f"ERR start slot number {start} is greater than end slot number {end}")
        slots.extend(range(start, end + 1))
    return slots


def _add(engine: ClusterEngine, slots: list[int]) -> Any:
    state = engine.state
    seen: set[int] = set()
    for slot in slots:
        if state.owner[slot] is not None:
            raise ReplyError(f"ERR Slot {slot} is already busy")
        if slot in seen:
            raise ReplyError(f"ERR Slot {slot} specified multiple times")
        seen.add(slot)
    for slot in slots:
        state.importing.pop(slot, None)
        state.assign(slot, state.myself)
    state.save()
    return OK


def _delete(engine: ClusterEngine, slots: list[int]) -> Any:
    state = engine.state
    seen: set[int] = set()
    for slot in slots:
        if state.owner[slot] is None:
            raise ReplyError(f"ERR Slot {slot} is already unassigned")
        if slot in seen:
            raise ReplyError(f"ERR Slot {slot} specified multiple times")
        seen.add(slot)
    for slot in slots:
        state.unassign(slot)
        state.migrating.pop(slot, None)
    state.save()
    return OK


def _setslot(engine: ClusterEngine, ctx: Ctx, argv: list[bytes]) -> Any:
    state = engine.state
    slot = _slot(argv[2])
    action = argv[3].upper()
    if action == b"STABLE" and len(argv) == 4:
        state.migrating.pop(slot, None)
        state.importing.pop(slot, None)
    elif action in (b"MIGRATING", b"IMPORTING", b"NODE") and len(argv) == 5:
        if action == b"MIGRATING":
            if state.owner[slot] is not state.myself:
                raise ReplyError(f"ERR I'm not the owner of hash slot {slot}")
            state.migrating[slot] = _node(engine, argv[4]).id
        elif action == b"IMPORTING":
            if state.owner[slot] is state.myself:
                raise ReplyError(f"ERR I'm already the owner of hash slot {slot}")
            state.importing[slot] = _node(engine, argv[4]).id
        else:
            target = _node(engine, argv[4], "ERR Unknown node {}")
            if state.owner[slot] is state.myself and not target.myself and ctx.db.keys_in_slot(slot, 1):
                raise ReplyError(f"ERR Can't assign hashslot {slot} to a different node while I still hold keys "
                                 "for this hash slot.")
            if not ctx.db.keys_in_slot(slot, 1):
                state.migrating.pop(slot, None)
            if target.myself and slot in state.importing:
                state.importing.pop(slot)
                state.bump_epoch()  # the slot is mine now: my claim must win over the old owner's
            state.assign(slot, target)
    else:
        raise ReplyError("ERR Invalid CLUSTER SETSLOT action or number of arguments. Try CLUSTER HELP")
    state.save()
    return OK


def _meet(engine: ClusterEngine, argv: list[bytes]) -> Any:
    host = argv[2].decode("latin-1")
    try:
        port = int(argv[3])
    except ValueError:
        raise ReplyError(f"ERR Invalid TCP base port specified: {argv[3].decode('latin-1')}") from None
    cport = port + 10000
    if len(argv) > 4:
        try:
            cport = int(argv[4])
        except ValueError:
            raise ReplyError(f"ERR Invalid TCP bus port specified: {argv[4].decode('latin-1')}") from None
    try:
        host = str(ipaddress.ip_address(host))  # Redis 7.0 takes an address, not a host name
    except ValueError:
        raise ReplyError(f"ERR Invalid node address specified: {host}:{port}") from None
    if not 0 < port < 65536:
        raise ReplyError(f"ERR Invalid node address specified: {host}:{port}")
    state = engine.state
    me = state.myself
    if (host, port) == (me.host, me.port) or any((n.host, n.port) == (host, port) for n in state.nodes.values()):
        return OK  # known already (Redis starts a handshake and drops the duplicate later)
    state.add_node(Node(new_node_id(), host, port, cport, handshake=True))
    state.save()
    engine.poke()
    return OK


def _forget(engine: ClusterEngine, argv: list[bytes]) -> Any:
    node = _node(engine, argv[2], "ERR Unknown node {}")
    if node.myself:
        raise ReplyError("ERR I tried hard but I can't forget myself...")
    engine.state.forget(node)
    engine.state.save()
    return OK


def _reset(engine: ClusterEngine, ctx: Ctx, argv: list[bytes]) -> Any:
    if len(argv) > 3:
        raise ReplyError(errors.SYNTAX)
    mode = argv[2].upper() if len(argv) == 3 else b"SOFT"
    if mode not in (b"HARD", b"SOFT"):
        raise ReplyError(errors.SYNTAX)
    if len(ctx.db):
        raise ReplyError("ERR CLUSTER RESET can't be called with master nodes containing keys")
    engine.state.reset(hard=mode == b"HARD")
    return OK


def _set_config_epoch(engine: ClusterEngine, argv: list[bytes]) -> Any:
    epoch = _int(argv[2])
    state = engine.state
    if epoch < 0:
        raise ReplyError(f"ERR Invalid config epoch specified: {epoch}")
    if len(state.nodes) > 1:
        raise ReplyError("ERR The user can assign a config epoch only when the node does not know any other node.")
    if state.myself.epoch:
        raise ReplyError("ERR Node config epoch is already non-zero")
    state.myself.epoch = epoch
    state.current_epoch = max(state.current_epoch, epoch)
    state.save()
    return OK


def _bumpepoch(engine: ClusterEngine) -> Any:
    from pion.protocol.resp import Status

    before = engine.state.myself.epoch
    engine.state.bump_epoch()
    engine.state.save()
    return Status(f"{'BUMPED' if engine.state.myself.epoch != before else 'STILL'} {engine.state.myself.epoch}")


def _countkeys(ctx: Ctx, argv: list[bytes]) -> int:
    slot = _int(argv[2])
    if not 0 <= slot < SLOTS:
        raise ReplyError("ERR Invalid slot")
    return len(ctx.db.keys_in_slot(slot))


def _getkeys(ctx: Ctx, argv: list[bytes]) -> list[bytes]:
    slot, count = _int(argv[2]), _int(argv[3])
    if not 0 <= slot < SLOTS or count < 0:
        raise ReplyError("ERR Invalid slot or number of keys")
    return ctx.db.keys_in_slot(slot, count) if count else []


def _replicas(engine: ClusterEngine, argv: list[bytes]) -> list:
    _node(engine, argv[2], "ERR Unknown node {}")
    return []


Handler = Callable[["ClusterEngine", "Ctx", list[bytes]], Any]

HANDLERS: dict[str, Handler] = {
    "info": lambda e, c, a: replies.info_reply(e.state, e.message_stats()),
    "myid": lambda e, c, a: e.state.myself.id,
    "nodes": lambda e, c, a: Verbatim(e.state.nodes_text()),
    "slots": lambda e, c, a: replies.slots_reply(e.state),
    "shards": lambda e, c, a: replies.shards_reply(e.state),
    "keyslot": lambda e, c, a: key_slot(a[2]),
    "countkeysinslot": lambda e, c, a: _countkeys(c, a),
    "getkeysinslot": lambda e, c, a: _getkeys(c, a),
    "addslots": lambda e, c, a: _add(e, [_slot(x) for x in a[2:]]),
    "addslotsrange": lambda e, c, a: _add(e, _ranges(a, "addslotsrange")),
    "delslots": lambda e, c, a: _delete(e, [_slot(x) for x in a[2:]]),
    "delslotsrange": lambda e, c, a: _delete(e, _ranges(a, "delslotsrange")),
    "flushslots": lambda e, c, a: _flushslots(e, c),
    "setslot": _setslot,
    "meet": lambda e, c, a: _meet(e, a),
    "forget": lambda e, c, a: _forget(e, a),
    "reset": _reset,
    "saveconfig": lambda e, c, a: (e.state.save(), OK)[1],
    "set-config-epoch": lambda e, c, a: _set_config_epoch(e, a),
    "bumpepoch": lambda e, c, a: _bumpepoch(e),
    "count-failure-reports": lambda e, c, a: (_node(e, a[2], "ERR Unknown node {}"), 0)[1],
    "links": lambda e, c, a: [],
    "replicas": lambda e, c, a: _replicas(e, a),
    "slaves": lambda e, c, a: _replicas(e, a),
    "help": lambda e, c, a: HELP,
}


def _flushslots(engine: ClusterEngine, ctx: Ctx) -> Any:
    if len(ctx.db):
        raise ReplyError("ERR DB must be empty to perform CLUSTER FLUSHSLOTS.")
    for slot in list(engine.state.myself.slots):
        engine.state.unassign(slot)
    engine.state.save()
    return OK


def run(engine: ClusterEngine, ctx: Ctx, argv: list[bytes]) -> Any:
    name = argv[1].lower().decode("latin-1")
    handler = HANDLERS.get(name)
    if handler is None:  # failover, replicate
        raise ReplyError(UNSUPPORTED.format(name.upper()))
    return handler(engine, ctx, argv)
