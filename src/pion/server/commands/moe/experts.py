"""``MOE.EXPERT.*``: experts of MoE models paged from their shards (spec 10.3, docs/moe.md).

The reference's commands and reply layouts: LOAD, FETCH (the blob ``[u8 n][u8 proj][u8 comp]
[u32 len][bytes]...``), PREFETCH, PIN, UNPIN, INFO, STATS, HIST (JSON, NSLIST, MHST SAVE/LOAD),
PRUNE; plus UNLOAD and LOCAL (the local lane: the path of the mapped file an expert lies in,
for a client on this host to map instead of receiving the bytes). Without ``--moe-cache`` every
command answers ``-UNAVAILABLE``, except STATS (``"enabled":false``) and PREFETCH/PIN/UNPIN
(``+OK``, no-ops), as the reference does. The state is the engine's (``pion.moe``); a miss is
read by the tier's loader threads while other clients go on (the command finishes deferred).
Nothing here touches the keyspace or the log: the tier is a cache of the shard files.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from concurrent.futures import Future
from typing import Any

from pion.moe import DISABLED_STATS, ExpertTier, Pruned, TierError
from pion.moe.histograms import DEFAULT_NS, HistogramError
from pion.moe.resident import Entry, run_load
from pion.protocol.errors import SYNTAX, ReplyError
from pion.protocol.resp import OK, BulkParts
from pion.server.args import arg
from pion.server.component import Component
from pion.server.deferred import Deferred, can_defer
from pion.server.registry import command

UNAVAILABLE = "UNAVAILABLE MoE expert tier not enabled (use --moe-cache DIR --moe-cache-mib N)"
NOT_INTEGER = "ERR value is not an integer or out of range"
MAX_INDEX = 1 << 20
_READ = dict(categories="@read @pion", group="pion", since="0.1.0")
_ADMIN = dict(categories="@admin @pion", group="pion", since="0.1.0")


def tier_of(ctx) -> ExpertTier:
    found = ctx.server.parts.moe
    if found is None:
        raise ReplyError(UNAVAILABLE)
    return found


def text(raw) -> str:
    return arg(raw).decode("utf-8", "surrogateescape")


def index(raw) -> int:
    data = arg(raw)
    if not data.isdigit() or int(data) >= MAX_INDEX:
        raise ReplyError(NOT_INTEGER)
    return int(data)


def namespace(ctx, words: list, at: int) -> str:
    """``[NS name]`` at ``words[at:]``; a tenant's namespaces are its own (``tenant/name``)."""
    if len(words) == at:
        name = DEFAULT_NS
    elif len(words) == at + 2 and arg(words[at]).upper() == b"NS":
        name = text(words[at + 1])
    else:
        raise ReplyError(SYNTAX)
    tenant = getattr(ctx.client, "tenant", None)
    return f"{tenant}/{name}" if tenant else name


def calling(fn, *args):
    """Run a tier call; its refusals become replies (``-PRUNED``, ``-ERR``)."""
    try:
        return fn(*args)
    except Pruned as exc:
        raise ReplyError(f"PRUNED {exc}") from None
    except (TierError, HistogramError) as exc:
        message = str(exc)
        raise ReplyError(message if message.startswith("ERR ") else f"ERR {message}") from None


def waited(future: Future):
    """Run (or wait for) a load; a failed read answers an error, never a parked client."""
    try:
        return run_load(future)
    except (OSError, ValueError) as exc:
        raise ReplyError(f"ERR MOE.EXPERT: cannot read the expert: {exc}") from None


def after_load(ctx, future: Future, finish):
    """Finish when the load is done: deferred for a connected client, at once inside MULTI/scripts."""
    if can_defer(ctx):
        return Deferred([lambda: waited(future)], lambda ctx, results: finish(results[0]))
    return finish(waited(future))


def count_fetch(ctx, entry_or_future) -> None:
    """PION.STATS ``moe_hits``/``moe_misses`` (the tenant's own ledger for a tenant)."""
    ctx.kv_ledger().bump("moe_hits" if isinstance(entry_or_future, Entry) else "moe_misses")


@command("MOE.EXPERT.LOAD", 2, "admin", **_ADMIN)
def moe_load(ctx, argv):
    """MOE.EXPERT.LOAD dir: load the model in dir (under --moe-cache); its id, the directory's name."""
    return calling(tier_of(ctx).load_model, text(argv[1])).encode()


@command("MOE.EXPERT.UNLOAD", 2, "admin", **_ADMIN)
def moe_unload(ctx, argv):
    """MOE.EXPERT.UNLOAD model: forget a model, its resident experts and its histograms."""
    calling(tier_of(ctx).unload_model, text(argv[1]))
    return OK


@command("MOE.EXPERT.FETCH", -4, "readonly", **_READ)
def moe_fetch(ctx, argv):
    """MOE.EXPERT.FETCH model layer expert [NS name]: the expert's blob (resident, else read)."""
    tier = tier_of(ctx)
    ns = namespace(ctx, argv, 4)
    found = calling(tier.fetch, text(argv[1]), index(argv[2]), index(argv[3]), ns)
    count_fetch(ctx, found)
    if isinstance(found, Entry):
        return BulkParts(found.pieces())
    return after_load(ctx, found, lambda entry: BulkParts(tier.land(entry).pieces()))


@command("MOE.EXPERT.LOCAL", -4, "readonly", **_READ)
def moe_local(ctx, argv):
    """MOE.EXPERT.LOCAL model layer expert [NS name]: where its parts lie, [[path, proj, comp, offset, len], ...].

    For a client on this host to map instead of receiving the bytes (counted as a FETCH). A resident expert's parts are in its resident file; one the budget would not keep is not
    read at all: the answer names its ranges in the shards."""
    tier = tier_of(ctx)
    ns = namespace(ctx, argv, 4)
    model, layer, expert = text(argv[1]), index(argv[2]), index(argv[3])
    found = calling(tier.local, model, layer, expert, ns)
    count_fetch(ctx, found)
    if isinstance(found, Entry):
        return location_reply(tier.locate(found))
    if isinstance(found, Future):
        return after_load(ctx, found, lambda entry: local_landed(tier, entry, model, layer, expert))
    return location_reply(found)


def local_landed(tier: ExpertTier, entry: Entry, model: str, layer: int, expert: int):
    located = tier.locate(tier.land(entry))
    return location_reply(located or calling(tier.shard_location, model, layer, expert))


def location_reply(located) -> list:
    return [[path.encode(), proj, comp, offset, nbytes] for path, proj, comp, offset, nbytes in located]


@command("MOE.EXPERT.PREFETCH", -4, "readonly", **_READ)
def moe_prefetch(ctx, argv):
    """MOE.EXPERT.PREFETCH model layer expert [expert ...]: start loading them; +OK at once."""
    tier = ctx.server.parts.moe
    experts = [index(raw) for raw in argv[3:]]
    if tier is not None:
        calling(tier.prefetch, text(argv[1]), index(argv[2]), experts)
    return OK


@command("MOE.EXPERT.PIN", 4, "readonly", **_READ)
def moe_pin(ctx, argv):
    """MOE.EXPERT.PIN model layer expert: keep the expert resident (loaded now if it is not)."""
    tier = ctx.server.parts.moe
    if tier is None:
        return OK
    future = calling(tier.pin, text(argv[1]), index(argv[2]), index(argv[3]))
    if future is None:
        return OK
    return after_load(ctx, future, lambda entry: (calling(tier.finish_pin, entry), OK)[1])


@command("MOE.EXPERT.UNPIN", 4, "readonly", **_READ)
def moe_unpin(ctx, argv):
    """MOE.EXPERT.UNPIN model layer expert: let the policy evict it again."""
    tier = ctx.server.parts.moe
    if tier is not None:
        calling(tier.unpin, text(argv[1]), index(argv[2]), index(argv[3]))
    return OK


@command("MOE.EXPERT.INFO", 2, "readonly", **_READ)
def moe_info(ctx, argv):
    """MOE.EXPERT.INFO model: the model's manifest and counters, as JSON."""
    info = calling(tier_of(ctx).model_info, text(argv[1]))
    return json.dumps(info, separators=(",", ":")).encode()


@command("MOE.EXPERT.STATS", 1, "readonly", **_READ)
def moe_stats(ctx, argv):
    """MOE.EXPERT.STATS: the tier's budget, residency and counters, as JSON (always answers)."""
    tier = ctx.server.parts.moe
    return json.dumps(DISABLED_STATS if tier is None else tier.stats(), separators=(",", ":")).encode()


@command("MOE.EXPERT.PRUNE", -4, "admin", **_ADMIN)
def moe_prune(ctx, argv):
    """MOE.EXPERT.PRUNE model layer expert [0|1]: prune (1, default) or restore (0); pruned count."""
    if len(argv) > 5 or (len(argv) == 5 and arg(argv[4]) not in (b"0", b"1")):
        raise ReplyError(SYNTAX)
    flag = len(argv) == 4 or arg(argv[4]) == b"1"
    return calling(tier_of(ctx).prune, text(argv[1]), index(argv[2]), index(argv[3]), flag)


@command("MOE.EXPERT.HIST", -2, "readonly", **_READ)
def moe_hist(ctx, argv):
    """MOE.EXPERT.HIST model [NS name | NSLIST | SAVE path [NS n] | LOAD path [NS n]]: counts as JSON, or MHST files.

    SAVE and LOAD answer the number of entries written or read; the files live under --moe-cache."""
    tier = tier_of(ctx)
    model = calling(tier.model, text(argv[1]))
    sub = arg(argv[2]).upper() if len(argv) > 2 else b""
    if sub == b"NSLIST" and len(argv) == 3:
        tenant = getattr(ctx.client, "tenant", None)
        visible = None if not tenant else [n for n in model.hist.spaces if n.startswith(f"{tenant}/")]
        return model.hist.render_list(visible).encode()
    if sub in (b"SAVE", b"LOAD") and len(argv) >= 4:
        if getattr(ctx.client, "tenant", None):
            raise ReplyError(f"NOPERM User {ctx.client.user} has no permissions to run 'MOE.EXPERT.HIST {sub.decode()}'")
        ns = calling(model.hist.find if sub == b"SAVE" else _get_or_create(model), namespace(ctx, argv, 4))
        path = calling(tier.inside_root, text(argv[3]))
        if sub == b"SAVE":
            return save_histogram(path, model.hist.encode(ns))
        loaded = calling(model.hist.load, ns, read_histogram(path))
        tier.seed_policy(text(argv[1]))
        return loaded
    ns = calling(model.hist.find, namespace(ctx, argv, 2))
    return model.hist.render(ns).encode()


def _get_or_create(model):
    return lambda name: model.hist.get(name, create=True)


def save_histogram(path, data: bytes) -> int:
    """Write an MHST file atomically (temp file, fsync, rename); the number of entries."""
    try:
        fd, temp = tempfile.mkstemp(prefix=".mhst-", dir=path.parent)
    except OSError as exc:
        raise ReplyError(f"ERR cannot write {path}: {exc.strerror or exc}") from None
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise ReplyError(f"ERR cannot write {path}: {exc.strerror or exc}") from None
    return int.from_bytes(data[8:12], "little")


def read_histogram(path) -> bytes:
    try:
        with open(path, "rb") as handle:
            return handle.read(64 * 1024 * 1024)
    except OSError as exc:
        raise ReplyError(f"ERR cannot read {path}: {exc.strerror or exc}") from None


# -- wiring --------------------------------------------------------------------------------


def install(server) -> ExpertTier | None:
    """With ``--moe-cache``: the tier, started before listening, stopped at shutdown, in INFO."""
    settings = server.settings
    if not settings.moe_cache:
        return None
    tier = ExpertTier(settings.moe_cache, settings.moe_cache_mib * 1024 * 1024, settings.dir)
    server.parts.moe = tier

    server.add_component(ExpertTierPart(tier))
    return tier


class ExpertTierPart(Component):
    """The expert tier: its resident-file directory opened at start and dropped at stop, its cron,
    CONFIG SET moe-cache-mib, INFO ``# Moe`` (after ``# Pion``, where it always stood)."""

    name = "moe"
    info_name = "moe"
    info_before = None

    def __init__(self, tier: ExpertTier) -> None:
        self.tier = tier

    async def start(self) -> None:
        import asyncio

        from pion.server.errors import StartupError

        try:
            self.tier.start(post=asyncio.get_running_loop().call_soon_threadsafe)
        except (TierError, OSError) as exc:
            raise StartupError(f"MoE expert tier: {exc}") from None

    async def stop(self) -> None:
        self.tier.stop()

    def cron(self) -> None:
        self.tier.cron()

    def config_changed(self, old, new) -> str | None:
        """moe-cache is fixed at start; moe-cache-mib applies at once (evicting down to it)."""
        if old.moe_cache != new.moe_cache:
            return "moe-cache can only be set at start"
        if old.moe_cache_mib != new.moe_cache_mib:
            self.tier.budget_changed(new.moe_cache_mib * 1024 * 1024)
        return None

    def info_section(self) -> dict[str, Any]:
        return self.tier.info()
