"""CLUSTER SLOT-STATS (Redis 8.2+): per-slot key-count, and with ``cluster-slot-stats-enabled
yes`` the cpu-usec, network-bytes-in and network-bytes-out of the commands that ran on each slot.

Why it is built this way: the three counters cost something on every command, so they are kept
only while the setting is on; ``Dispatcher.slot_stats`` is this module's ``SlotCounters`` then
and None otherwise, and each hook is one ``is not None`` test when it is off (the fast lane
never runs on a cluster node, so it has no hook). A command's slot is the one the router found
for its keys (``Client.slot``, -1 for a keyless command), as Redis's ``c->slot``; a script
that declared no keys takes the slot of the first key it touches, unless it allows cross-slot
keys (then it counts nowhere), as Redis's scriptVerifyClusterState and
clusterSlotStatsInvalidateSlotIfApplicable.

What is counted, as Redis's cluster_slot_stats.c and its tests/unit/cluster/slot-stats.tcl:

- cpu-usec: the usec INFO commandstats adds for a top-level command (EXEC, EVAL and FCALL
  include what they ran; the commands inside are not counted again); a blocked command is
  counted when it ends, with all its tries;
- network-bytes-in: the request's bytes as the client sent them (a multibulk frame, or an
  inline line with its newline), for a command queued in MULTI when it is queued, for EXEC
  with MULTI's 15 bytes added, for a blocked command when it ends;
- network-bytes-out: the reply's bytes (a blocked command's when it is sent), and an SPUBLISH
  message's bytes to each subscriber on this node.

CONFIG RESETSTAT clears the three counters of every slot; a slot given to a node
(ADDSLOTS, SETSLOT NODE) has its counters cleared, as Redis's clusterAddSlot.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pion.protocol import errors
from pion.protocol.errors import ReplyError
from pion.protocol.keyslot import SLOTS, key_slot
from pion.server.args import parse_int
from pion.server.cluster.router import command_keys
from pion.storage.keyspace import now_ms

if TYPE_CHECKING:
    from pion.server.cluster import ClusterEngine
    from pion.server.context import Ctx
    from pion.server.net.client import Client
    from pion.server.registry import CommandSpec

METRICS = ("key-count", "cpu-usec", "network-bytes-in", "network-bytes-out")
#: the bytes of ``*1\r\n$5\r\nmulti\r\n``, counted with the EXEC that ends the transaction
MULTI_BYTES = 15

INVALID_SLOT = "ERR Invalid or out of range slot"
BAD_METRIC = "ERR Unrecognized sort metric for ORDERBY."
BAD_LIMIT = "ERR Limit has to lie in between 1 and 16384 (maximum number of slots)."
REPEATED = "ERR Multiple filters of the same type are disallowed."


class SlotCounters:
    """The three counters of every slot (plain lists: one index and one add per command)."""

    __slots__ = ("cpu", "net_in", "net_out")

    def __init__(self) -> None:
        self.cpu = [0] * SLOTS
        self.net_in = [0] * SLOTS
        self.net_out = [0] * SLOTS

    def reset(self) -> None:
        """CONFIG RESETSTAT."""
        self.cpu = [0] * SLOTS
        self.net_in = [0] * SLOTS
        self.net_out = [0] * SLOTS

    def reset_slot(self, slot: int) -> None:
        """The slot was given to a node: its history is not the new owner's."""
        self.cpu[slot] = self.net_in[slot] = self.net_out[slot] = 0

    # -- the hooks (called only while the setting is on) ------------------------------------

    def add_cpu(self, client: Client, usec: int) -> None:
        slot = client.slot
        if slot >= 0:
            self.cpu[slot] += usec

    def add_in(self, client: Client, argv: list[bytes], exec_: bool = False) -> None:
        slot = client.slot
        if slot >= 0:
            self.net_in[slot] += request_size(client, argv) + (MULTI_BYTES if exec_ else 0)

    def add_shard_messages(self, clients: Any, push: Any, channel: bytes) -> None:
        """An SPUBLISH's message to the node's subscribers counts on the channel's slot (Redis's
        internal propagation; what goes to other nodes does not count). A method, so the core's
        pub/sub calls it without importing the cluster wing."""
        from pion.protocol.resp import encode

        slot = key_slot(channel)
        for client in clients:
            self.add_out(slot, len(encode(push, client.proto)))

    def add_out(self, slot: int, nbytes: int) -> None:
        if slot >= 0:
            self.net_out[slot] += nbytes


def request_size(client: Client, argv: list[bytes]) -> int:
    """The bytes the client sent for ``argv``: its inline line when the reader parsed it from
    one (``RequestReader.inline_argv``), else its multibulk frame (hiredis takes only the
    canonical form, so the frame's size follows from the arguments)."""
    conn = client.conn
    reader = conn.reader if conn is not None else None
    if reader is not None and reader.inline_argv is argv:
        return reader.inline_size  # type: ignore[no-any-return]
    size = 3 + len(str(len(argv)))
    for arg in argv:
        length = len(arg)
        size += length + 5 + len(str(length))
    return size


def script_call(client: Client, spec: CommandSpec, argv: list[bytes], cross_slot: bool) -> None:
    """A script's ``redis.call``: a script that declared no keys counts on the slot of the first
    key it touches; one allowed cross-slot keys counts nowhere."""
    if cross_slot:
        client.slot = -1
    elif client.slot < 0:
        keys = command_keys(spec, argv)
        if keys:
            client.slot = key_slot(keys[0])


# -- the command ---------------------------------------------------------------------------


def _slot(raw: bytes) -> int:
    slot = parse_int(raw, INVALID_SLOT)  # Redis's getSlotOrReply: a 64-bit integer, then the range
    if not 0 <= slot < SLOTS:
        raise ReplyError(INVALID_SLOT)
    return slot


def _syntax_error(argv: list[bytes]) -> ReplyError:
    """Redis's addReplySubcommandSyntaxError: the subcommand as the client typed it."""
    sub = argv[1].decode("latin-1").replace("\r", " ").replace("\n", " ")[:128]
    return ReplyError(f"ERR unknown subcommand or wrong number of arguments for '{sub}'. "
                      f"Try {argv[0].decode('latin-1').upper()} HELP.")


def _key_counts(ctx: Ctx) -> Any:
    """slot -> its live keys' count, as CLUSTER COUNTKEYSINSLOT counts them."""
    db = ctx.db
    slots = db.slot_index().slots
    expires = db.expires
    if not expires:
        return lambda slot: len(slots.get(slot, ()))
    now = now_ms()

    def count(slot: int) -> int:
        members = slots.get(slot)
        if not members:
            return 0
        n = 0
        for key in members:
            when = expires.get(key)
            if when is None or when > now:
                n += 1
        return n

    return count


def slot_stats(engine: ClusterEngine, ctx: Ctx, argv: list[bytes]) -> list[Any]:
    """CLUSTER SLOT-STATS SLOTSRANGE start-slot end-slot | ORDERBY metric [LIMIT limit] [ASC|DESC]"""
    counters = ctx.server.dispatcher.slot_stats
    mine = engine.state.myself.slots
    count = _key_counts(ctx)
    sub = argv[2].lower()
    if len(argv) == 5 and sub == b"slotsrange":
        start, end = _slot(argv[3]), _slot(argv[4])
        if start > end:
            raise ReplyError(f"ERR Start slot number {start} is greater than end slot number {end}")
        chosen = [slot for slot in range(start, end + 1) if slot in mine]
    elif len(argv) >= 4 and sub == b"orderby":
        metric = argv[3].lower().decode("latin-1")
        if metric not in METRICS or (metric != "key-count" and counters is None):
            raise ReplyError(BAD_METRIC)
        limit, desc = _orderby_options(argv)
        if metric == "key-count":
            value = count
        else:
            column = {"cpu-usec": counters.cpu, "network-bytes-in": counters.net_in,  # type: ignore[union-attr]
                      "network-bytes-out": counters.net_out}[metric]  # type: ignore[union-attr]
            value = column.__getitem__
        # ties in ascending slot order both ways, as Redis's comparators
        chosen = sorted(mine, key=(lambda s: (-value(s), s)) if desc else (lambda s: (value(s), s)))[:limit]
    else:
        raise _syntax_error(argv)
    if counters is None:
        return [[slot, {"key-count": count(slot)}] for slot in chosen]
    cpu, net_in, net_out = counters.cpu, counters.net_in, counters.net_out
    return [[slot, {"key-count": count(slot), "cpu-usec": cpu[slot], "network-bytes-in": net_in[slot],
                    "network-bytes-out": net_out[slot]}] for slot in chosen]


def _orderby_options(argv: list[bytes]) -> tuple[int, bool]:
    """ORDERBY's [LIMIT limit] [ASC|DESC], in any order, each at most once (Redis's parser)."""
    limit, desc = SLOTS, True
    limits = orders = 0
    i = 4
    while i < len(argv):
        word = argv[i].lower()
        if word == b"limit" and i + 1 < len(argv):
            limit = parse_int(argv[i + 1], BAD_LIMIT)  # getRangeLongFromObjectOrReply's own text
            if not 1 <= limit <= SLOTS:
                raise ReplyError(BAD_LIMIT)
            i += 1
            limits += 1
        elif word in (b"asc", b"desc"):
            desc = word == b"desc"
            orders += 1
        else:
            raise ReplyError(errors.SYNTAX)
        if limits > 1 or orders > 1:
            raise ReplyError(REPEATED)
        i += 1
    return limit, desc
