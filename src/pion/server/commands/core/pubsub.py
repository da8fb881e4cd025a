"""Pub/Sub commands: (P|S)SUBSCRIBE, (P|S)UNSUBSCRIBE, PUBLISH, SPUBLISH, PUBSUB.

Each (un)subscription is confirmed with its own push reply carrying the client's remaining
subscription count, so one command may answer several times (``Replies``).
"""

from __future__ import annotations

from pion.protocol.resp import Push, Replies
from pion.server.context import Ctx
from pion.server.registry import command
from pion.storage.glob import glob_match

_SUB_FLAGS = "pubsub noscript loading stale"


def _hub(ctx: Ctx):
    """The client's hub: a tenant's channels are its own (``PubSubHub.for_client``)."""
    return ctx.server.pubsub.for_client(ctx.client)


def _confirm(kind: bytes, name: bytes | None, ctx: Ctx, shard: bool = False) -> Push:
    client = ctx.client
    count = len(client.shard_subscriptions) if shard else len(client.subscriptions) + len(client.patterns)
    return Push([kind, name, count])


def _each(ctx: Ctx, names: list[bytes], kind: bytes, change, shard: bool = False) -> Replies:
    """Apply ``change(client, name)`` to each name, confirming each with its own push reply."""
    replies = Replies()
    for name in names:
        change(ctx.client, name)
        replies.append(_confirm(kind, name, ctx, shard))
    return replies


def _leave(ctx: Ctx, names: list[bytes], current: set[bytes], kind: bytes, change, shard: bool = False) -> Replies:
    """The UNSUBSCRIBE family: no names means all of them; with none held, one null confirmation."""
    names = names or sorted(current)
    if not names:
        return Replies([_confirm(kind, None, ctx, shard)])
    return _each(ctx, names, kind, change, shard)


@command("SUBSCRIBE", -2, _SUB_FLAGS, categories="@pubsub @slow", group="pubsub", since="2.0.0")
def subscribe(ctx: Ctx, argv: list[bytes]):
    """SUBSCRIBE channel [channel ...]"""
    return _each(ctx, argv[1:], b"subscribe", _hub(ctx).subscribe)


@command("UNSUBSCRIBE", -1, _SUB_FLAGS, categories="@pubsub @slow", group="pubsub", since="2.0.0")
def unsubscribe(ctx: Ctx, argv: list[bytes]):
    """UNSUBSCRIBE [channel [channel ...]]"""
    return _leave(ctx, argv[1:], ctx.client.subscriptions, b"unsubscribe", _hub(ctx).unsubscribe)


@command("PSUBSCRIBE", -2, _SUB_FLAGS, categories="@pubsub @slow", group="pubsub", since="2.0.0")
def psubscribe(ctx: Ctx, argv: list[bytes]):
    """PSUBSCRIBE pattern [pattern ...]"""
    return _each(ctx, argv[1:], b"psubscribe", _hub(ctx).psubscribe)


@command("PUNSUBSCRIBE", -1, _SUB_FLAGS, categories="@pubsub @slow", group="pubsub", since="2.0.0")
def punsubscribe(ctx: Ctx, argv: list[bytes]):
    """PUNSUBSCRIBE [pattern [pattern ...]]"""
    return _leave(ctx, argv[1:], ctx.client.patterns, b"punsubscribe", _hub(ctx).punsubscribe)


@command("SSUBSCRIBE", -2, _SUB_FLAGS, keys=(1, -1, 1), categories="@pubsub @slow", group="pubsub", since="7.0.0")
def ssubscribe(ctx: Ctx, argv: list[bytes]):
    """SSUBSCRIBE shardchannel [shardchannel ...]"""
    hub = _hub(ctx)
    return _each(ctx, argv[1:], b"ssubscribe", lambda client, name: hub.subscribe(client, name, shard=True), shard=True)


@command("SUNSUBSCRIBE", -1, _SUB_FLAGS, keys=(1, -1, 1), categories="@pubsub @slow", group="pubsub", since="7.0.0")
def sunsubscribe(ctx: Ctx, argv: list[bytes]):
    """SUNSUBSCRIBE [shardchannel [shardchannel ...]]"""
    hub = _hub(ctx)
    return _leave(ctx, argv[1:], ctx.client.shard_subscriptions, b"sunsubscribe",
                  lambda client, name: hub.unsubscribe(client, name, shard=True), shard=True)


@command("PUBLISH", 3, "pubsub loading stale fast may_replicate", categories="@pubsub @fast", group="pubsub", since="2.0.0")
def publish(ctx: Ctx, argv: list[bytes]):
    """PUBLISH channel message"""
    return _hub(ctx).publish(argv[1], argv[2])


@command("SPUBLISH", 3, "pubsub loading stale fast may_replicate", keys=(1, 1, 1), categories="@pubsub @fast", group="pubsub", since="7.0.0")
def spublish(ctx: Ctx, argv: list[bytes]):
    """SPUBLISH shardchannel message"""
    return _hub(ctx).publish(argv[1], argv[2], shard=True)


@command("PUBSUB|CHANNELS", -2, "pubsub loading stale", categories="@pubsub @slow", group="pubsub", since="2.8.0")
def pubsub_channels(ctx: Ctx, argv: list[bytes]):
    """PUBSUB CHANNELS [pattern]"""
    return _matching(_hub(ctx).channels, argv)


@command("PUBSUB|SHARDCHANNELS", -2, "pubsub loading stale", categories="@pubsub @slow", group="pubsub", since="7.0.0")
def pubsub_shardchannels(ctx: Ctx, argv: list[bytes]):
    """PUBSUB SHARDCHANNELS [pattern]"""
    return _matching(_hub(ctx).shard_channels, argv)


def _matching(table: dict, argv: list[bytes]) -> list[bytes]:
    if len(argv) > 3:
        from pion.protocol.errors import ReplyError, wrong_arity

        raise ReplyError(wrong_arity(f"pubsub|{argv[1].lower().decode()}"))
    pattern = argv[2] if len(argv) == 3 else None
    return [name for name in table if pattern is None or glob_match(pattern, name)]


@command("PUBSUB|NUMSUB", -2, "pubsub loading stale", categories="@pubsub @slow", group="pubsub", since="2.8.0")
def pubsub_numsub(ctx: Ctx, argv: list[bytes]):
    """PUBSUB NUMSUB [channel [channel ...]]"""
    return _counts(_hub(ctx).channels, argv[2:])


@command("PUBSUB|SHARDNUMSUB", -2, "pubsub loading stale", categories="@pubsub @slow", group="pubsub", since="7.0.0")
def pubsub_shardnumsub(ctx: Ctx, argv: list[bytes]):
    """PUBSUB SHARDNUMSUB [shardchannel [shardchannel ...]]"""
    return _counts(_hub(ctx).shard_channels, argv[2:])


def _counts(table: dict, names: list[bytes]) -> list:
    """A flat [name, count, ...] array in both protocols, as Redis answers (not a map)."""
    out: list = []
    for name in names:
        out += [name, len(table.get(name, ()))]
    return out


@command("PUBSUB|NUMPAT", 2, "pubsub loading stale", categories="@pubsub @slow", group="pubsub", since="2.8.0")
def pubsub_numpat(ctx: Ctx, argv: list[bytes]):
    """PUBSUB NUMPAT"""
    return len(_hub(ctx).patterns)


@command("PUBSUB|HELP", 2, "loading stale", categories="@slow", group="pubsub", since="6.2.0")
def pubsub_help(ctx: Ctx, argv: list[bytes]):
    """PUBSUB HELP"""
    from pion.protocol.resp import Status

    lines = [
        "PUBSUB <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
        "CHANNELS [<pattern>]",
        "    Return the currently active channels matching a <pattern> (default: '*').",
        "NUMPAT",
        "    Return number of subscriptions to patterns.",
        "NUMSUB [<channel> ...]",
        "    Return the number of subscribers for the specified channels, excluding",
        "    pattern subscriptions(default: no channels).",
        "SHARDCHANNELS [<pattern>]",
        "    Return the currently active shard level channels matching a <pattern> (default: '*').",
        "SHARDNUMSUB [<shardchannel> ...]",
        "    Return the number of subscribers for the specified shard level channel(s)",
        "HELP",
        "    Print this help.",
    ]
    return [Status(line) for line in lines]
