"""``KV.PREFIX.*``: the prefix registry, with the reference's names, argument order and replies.

A prefix namespace ``ns`` keeps K rows in V-store session ``ns_pk`` and V rows in ``ns_pv``.
Pion's differences: LOOKUP answers ``+HIT`` only when every layer of both sides holds every row
of the prefix and those rows are durable; re-registering with a different codec, dim, manifest
or token chain is refused; and there are new commands and options: ``MANIFEST``, ``MATCH``,
``PIN``/``UNPIN``, and REGISTER's ``MANIFEST``, ``CHAIN`` (with ``SEED``) and ``PARENT``.
"""

from __future__ import annotations

import time

import numpy as np

from pion.codecs.chain import HASH_BYTES
from pion.kvcache.layer import LayerSpec
from pion.kvcache.match import match, match_tokens
from pion.kvcache.space import sides
from pion.kvcache.staging import check_token
from pion.protocol.errors import ReplyError
from pion.protocol.resp import OK, Status
from pion.server.args import arg, check_ns, info_text, strict_int
from pion.server.commands.kv.stage import check_plain_register, stage_register
from pion.server.commands.kv.vstore import UNIFORM_NAMES
from pion.server.registry import command

MAX_HASHES = 1_048_576
MAX_PREFILL_MS = 86_400_000
MAX_TOKENS_CREDIT = 100_000_000
REGISTER_OPTIONS = "BLOCKS, PREFILL_MS, MANIFEST, CHAIN, SEED, PARENT, STAGE, REPLACE"


# -- REGISTER --------------------------------------------------------------------------------


def parse_vquant(raw: bytes) -> str:
    name = arg(raw).decode("latin-1").lower()
    if name not in UNIFORM_NAMES.split("|"):
        raise ReplyError(f"ERR KV.PREFIX.REGISTER: unknown vquant '{name}' (want {UNIFORM_NAMES})")
    return name


def parse_blocks(argv: list[bytes], at: int) -> tuple[int, bytes]:
    if len(argv) < at + 4:
        raise ReplyError("ERR BLOCKS requires: block_size hash_count hash_blob")
    size = strict_int(argv[at + 1], 1, 8192, "ERR BLOCKS block_size out of range (1..8192)")
    count = strict_int(argv[at + 2], 0, MAX_HASHES, "ERR BLOCKS hash_count out of range (0..1048576)")
    if len(argv[at + 3]) != count * 8:
        raise ReplyError("ERR BLOCKS hash_blob length mismatch")
    return size, argv[at + 3]


def parse_register_options(argv: list[bytes]) -> dict:
    """The options after vquant; ``chain`` is ``(block_size, token_blob, seed)`` (seed ROOT without SEED)."""
    options: dict = {}
    seed = None
    pos = 4
    if pos < len(argv) and arg(argv[pos]).upper() == b"BLOCKS":
        options["blocks"] = parse_blocks(argv, pos)
        pos += 4
    while pos < len(argv):
        name = arg(argv[pos]).upper()
        needs = {b"PREFILL_MS": 1, b"MANIFEST": 1, b"CHAIN": 2, b"SEED": 1, b"PARENT": 1, b"STAGE": 1,
                 b"REPLACE": 0}.get(name)
        if name == b"BLOCKS":
            raise ReplyError("ERR BLOCKS must come right after vquant")
        if needs is None:
            raise ReplyError(f"ERR KV.PREFIX.REGISTER unknown option ({REGISTER_OPTIONS})")
        if pos + needs >= len(argv) + (needs == 0):
            raise ReplyError("ERR KV.PREFIX.REGISTER option needs a value")
        value = argv[pos + 1] if needs else b""
        if name == b"REPLACE":
            options["replace"] = True
        elif name == b"STAGE":
            options["stage"] = check_token(arg(value))
        elif name == b"PREFILL_MS":
            options["prefill_us"] = 1000 * strict_int(value, 0, MAX_PREFILL_MS, "ERR PREFILL_MS out of range (0..86400000)")
        elif name == b"MANIFEST":
            options["manifest"] = value
        elif name == b"PARENT":
            options["parent"] = check_ns(value)
        elif name == b"SEED":
            seed = arg(value)
            if len(seed) != HASH_BYTES:
                raise ReplyError("ERR SEED must be 16 bytes")
        else:
            size = strict_int(value, 1, 8192, "ERR CHAIN block_size out of range (1..8192)")
            if len(argv[pos + 2]) % 4:
                raise ReplyError("ERR CHAIN token_blob length must be a multiple of 4 (u32 token ids)")
            options["chain"] = (size, argv[pos + 2])
        pos += 1 + needs
    if seed is not None:
        if "chain" not in options:
            raise ReplyError("ERR KV.PREFIX.REGISTER SEED needs CHAIN")
        options["chain"] = (*options["chain"], seed)
    if "replace" in options and "stage" not in options:
        raise ReplyError("ERR KV.PREFIX.REGISTER REPLACE needs STAGE (a replacement is published whole)")
    return options


@command("KV.PREFIX.REGISTER", -4, "write denyoom zero_copy", categories="@write @pion", group="pion", since="0.1.0")
def kv_prefix_register(ctx, argv):
    """KV.PREFIX.REGISTER ns kv_dim vquant [BLOCKS size count blob] [PREFILL_MS ms] [MANIFEST json] [CHAIN size tokens [SEED seed]] [PARENT ns] [STAGE token [REPLACE]].

    SEED (16 bytes) starts the CHAIN's block hashes instead of 16 zero bytes: give each model (and
    codec schema) its own, so MATCH never answers with another model's namespace. MANIFEST needs
    STAGE: a staged store (``KV.PREFIX.PUBLISH``) that becomes readable whole or not at all.
    """
    ns = check_ns(argv[1])
    kv_dim = strict_int(argv[2], 1, 8192, "ERR kv_dim out of range")
    vquant = parse_vquant(argv[3])
    options = parse_register_options(argv)
    spec = LayerSpec(kv_dim, vquant)
    if "stage" in options:
        return stage_register(ctx, argv, ns, spec, options)
    if not ctx.replaying:
        check_plain_register(ctx.kv_space(), ns, options)
    if ctx.kv_space().register(ns, spec, options):
        ctx.dirty()
    return OK


# -- LOOKUP, MATCH -------------------------------------------------------------------------


def parse_lookup_options(argv: list[bytes]) -> tuple[int | None, int | None]:
    tokens = prefill_ms = None
    pos = 2
    while pos < len(argv):
        name = arg(argv[pos]).upper()
        if name not in (b"TOKENS", b"PREFILL_MS"):
            raise ReplyError("ERR KV.PREFIX.LOOKUP unknown option (TOKENS, PREFILL_MS)")
        if pos + 1 >= len(argv):
            raise ReplyError("ERR KV.PREFIX.LOOKUP option needs a value")
        if name == b"TOKENS":
            tokens = strict_int(argv[pos + 1], 0, MAX_TOKENS_CREDIT, "ERR TOKENS out of range (0..100000000)")
        else:
            prefill_ms = strict_int(argv[pos + 1], 0, MAX_PREFILL_MS, "ERR PREFILL_MS out of range (0..86400000)")
        pos += 2
    return tokens, prefill_ms


@command("KV.PREFIX.LOOKUP", -2, "readonly fast", categories="@read @pion", group="pion", since="0.1.0")
def kv_prefix_lookup(ctx, argv):
    """KV.PREFIX.LOOKUP ns [TOKENS n] [PREFILL_MS ms]: +HIT when every row of both sides is stored and durable.

    The reply waits for the rows' log records to be durable (never a HIT for rows a crash could lose).
    """
    ns = check_ns(argv[1])
    tokens, prefill_ms = parse_lookup_options(argv)
    sp = ctx.kv_space()
    stats = ctx.kv_ledger()
    complete, seq = sp.completeness(ns)
    if not complete:
        stats.miss()
        return Status("MISS")
    entry = sp.registry.get(ns)
    if tokens is not None:
        credit_us = 1000 * prefill_ms if prefill_ms else None
    elif prefill_ms is not None:
        credit_us = 1000 * prefill_ms
    else:
        credit_us = entry.prefill_us if entry is not None else None
    stats.hit(sp.hit_tokens(ns) if tokens is None else tokens, credit_us)
    if entry is not None:  # the dashboard's per-prefix hits and last hit
        entry.note_hit(time.time())
    sp.touch(ns)
    ctx.hold_until_durable(seq)
    return Status("HIT")


def parse_match_options(argv: list[bytes]) -> tuple[np.ndarray | None, bytes | None, bool]:
    """``(TOKENS ids, SEED, WITHTOKENS)`` after the hash blob, in any order."""
    tokens = seed = None
    with_tokens = False
    pos = 3
    while pos < len(argv):
        name = arg(argv[pos]).upper()
        if name == b"WITHTOKENS":
            with_tokens, pos = True, pos + 1
            continue
        if name not in (b"TOKENS", b"SEED"):
            raise ReplyError("ERR KV.PREFIX.MATCH unknown option (TOKENS, SEED, WITHTOKENS)")
        if pos + 1 >= len(argv):
            raise ReplyError("ERR KV.PREFIX.MATCH option needs a value")
        value = argv[pos + 1]
        if name == b"TOKENS":
            if len(value) % 4:
                raise ReplyError("ERR KV.PREFIX.MATCH TOKENS blob length must be a multiple of 4 (u32 token ids)")
            tokens = np.frombuffer(value, dtype="<u4")
        else:
            seed = arg(value)
            if len(seed) != HASH_BYTES:
                raise ReplyError("ERR SEED must be 16 bytes")
        pos += 2
    if with_tokens and tokens is None:
        raise ReplyError("ERR KV.PREFIX.MATCH WITHTOKENS needs TOKENS")
    return tokens, seed, with_tokens


@command("KV.PREFIX.MATCH", -3, "readonly", categories="@read @pion", group="pion", since="0.1.0")
def kv_prefix_match(ctx, argv):
    """KV.PREFIX.MATCH block_size hash_blob [TOKENS token_blob] [SEED seed] [WITHTOKENS]: [namespace or nil, leading blocks matched].

    hash_blob: 16-byte chain hashes (``pion.codecs.chain``) of the request's full blocks; with
    TOKENS (u32 LE ids) the stored ids are compared too, so a hash collision cannot match.
    WITHTOKENS answers [namespace, blocks, tokens held, block size, tokens stored, generation]: the
    exact number of leading request tokens the prefix holds (any length, not only whole blocks),
    its chain's block size, its length and its entry's generation (``KV.PREFIX.GENERATION``: a
    reader that fetches it next checks it is still this entry); with SEED, prefixes of other block
    sizes and prefixes shorter than one block are found too.
    """
    size = strict_int(argv[1], 1, 8192, "ERR KV.PREFIX.MATCH block_size out of range (1..8192)")
    blob = arg(argv[2])
    if len(blob) % HASH_BYTES or len(blob) // HASH_BYTES > MAX_HASHES:
        raise ReplyError("ERR KV.PREFIX.MATCH hash_blob must be a multiple of 16 bytes (at most 1048576 hashes)")
    tokens, seed, with_tokens = parse_match_options(argv)
    hashes = [blob[i:i + HASH_BYTES] for i in range(0, len(blob), HASH_BYTES)]
    sp = ctx.kv_space()
    if with_tokens:
        ns, blocks, held, block_size, stored, seq = match_tokens(sp, size, hashes, tokens, seed)
    else:
        ns, blocks, seq = match(sp, size, hashes, tokens)
    if ns is not None:
        sp.touch(ns)
        ctx.hold_until_durable(seq)
    if not with_tokens:
        return [ns, blocks]
    prefix = sp.registry.get(ns) if ns is not None else None
    return [ns, blocks, held, block_size, stored, 0 if prefix is None else prefix.generation]


# -- DROP, PIN ---------------------------------------------------------------------------------


@command("KV.PREFIX.DROP", -2, "write", categories="@write @pion", group="pion", since="0.1.0")
def kv_prefix_drop(ctx, argv):
    """KV.PREFIX.DROP ns [ns ...]: free both sides (and SSM state) of each; how many held anything."""
    names = [check_ns(raw) for raw in argv[1:]]
    sp = ctx.kv_space()
    dropped = sum(1 for ns in names if sp.drop_prefix(ns))
    if dropped:
        ctx.dirty(dropped)
    return dropped


def set_pin(ctx, argv, pinned: bool) -> int:
    ns = check_ns(argv[1])
    sp = ctx.kv_space()
    if ns not in sp.units():
        return 0
    if (ns in sp.evictor.pinned) != pinned:
        if pinned:
            sp.evictor.pinned.add(ns)
        else:
            sp.evictor.pinned.discard(ns)
        ctx.dirty()
    return 1


@command("KV.PREFIX.PIN", 2, "write fast", categories="@write @pion", group="pion", since="0.1.0")
def kv_prefix_pin(ctx, argv):
    """KV.PREFIX.PIN ns: never evict this prefix (nor, while it lives, its ancestors); 1 if known."""
    return set_pin(ctx, argv, True)


@command("KV.PREFIX.UNPIN", 2, "write fast", categories="@write @pion", group="pion", since="0.1.0")
def kv_prefix_unpin(ctx, argv):
    """KV.PREFIX.UNPIN ns: make a pinned prefix evictable again; 1 if known."""
    return set_pin(ctx, argv, False)


# -- read-only views of the registry ----------------------------------------------------------


@command("KV.PREFIX.MANIFEST", 2, "readonly fast", categories="@read @pion", group="pion", since="0.1.0")
def kv_prefix_manifest(ctx, argv):
    """KV.PREFIX.MANIFEST ns: the JSON manifest registered with the prefix, or nil."""
    prefix = ctx.kv_space().registry.get(check_ns(argv[1]))
    return None if prefix is None or prefix.manifest_raw is None else prefix.manifest_raw


@command("KV.PREFIX.BLOCKS", 2, "readonly fast", categories="@read @pion", group="pion", since="0.1.0")
def kv_prefix_blocks(ctx, argv):
    """KV.PREFIX.BLOCKS ns: [u32 block_size][u32 count][count x u64] or +UNKNOWN."""
    ns = check_ns(argv[1])
    sp = ctx.kv_space()
    prefix = sp.registry.get(ns)
    if prefix is None or prefix.block_hashes is None:
        return Status("UNKNOWN")
    sp.touch(ns)
    return prefix.blocks_reply()


@command("KV.PREFIX.MEMBERSHIP", 4, "readonly fast", categories="@read @pion", group="pion", since="0.1.0")
def kv_prefix_membership(ctx, argv):
    """KV.PREFIX.MEMBERSHIP ns hash_count hash_blob: bitmap (LSB first) of the probes in the block table."""
    ns = check_ns(argv[1])
    count = strict_int(argv[2], 0, MAX_HASHES, "ERR hash_count out of range (0..1048576)")
    if len(argv[3]) != count * 8:
        raise ReplyError("ERR hash_blob length mismatch")
    sp = ctx.kv_space()
    prefix = sp.registry.get(ns)
    if prefix is None or prefix.block_hashes is None:
        return Status("UNKNOWN")
    sp.touch(ns)
    return prefix.membership(arg(argv[3]))


@command("KV.PREFIX.OWNER", 2, "readonly fast", categories="@read @pion", group="pion", since="0.1.0")
def kv_prefix_owner(ctx, argv):
    """KV.PREFIX.OWNER ns: +0 (this node owns every prefix it holds) or +-1 when unknown."""
    ns = check_ns(argv[1])
    sp = ctx.kv_space()
    known = sp.registry.get(ns) is not None or sp.vstore.get(sides(ns)[0]) is not None
    return Status("0" if known else "-1")


@command("KV.PREFIX.INFO", 1, "readonly fast", categories="@read @pion", group="pion", since="0.1.0")
def kv_prefix_info(ctx, argv):
    """KV.PREFIX.INFO: key:value lines about the registry, the V-store and the log."""
    return info_text(prefix_info_rows(ctx))


def prefix_info_rows(ctx) -> list[tuple[str, object]]:
    sp = ctx.kv_space()
    store = sp.vstore
    k_sessions = [s for sid, s in store.sessions.items() if sid.endswith(b"_pk")]
    journal = ctx.server.journal
    return [
        ("registered_prefixes", len(k_sessions)),
        ("total_prefix_tokens", sum(s.layer(0).tokens for s in k_sessions if s.layer(0) is not None)),
        ("total_prefix_rows", sum(s.total_tokens() for s in k_sessions)),
        ("vstore_sessions", len(store)), ("vstore_total_fetches", store.total_fetches),
        ("vstore_evictions", sp.evictor.evictions), ("vstore_max_sessions", 0),
        ("vstore_bytes", store.nbytes), ("ssm_bytes", sp.ssm.nbytes), ("state_bytes", sp.state.nbytes),
        ("kv_maxmemory", ctx.server.settings.kv_maxmemory), ("pinned_prefixes", len(sp.evictor.pinned)),
        ("staged_prefixes", len(sp.stagings)),
        ("staged_bytes", sum(st.row_bytes + st.ssm_bytes for st in sp.stagings.values())),
        ("wal_enabled", int(ctx.server.settings.appendonly and hasattr(journal, "log_bytes"))),
        ("wal_bytes", getattr(journal, "log_bytes", 0)), ("wal_appended", journal.seq),
        ("wal_replayed", ctx.server.replayed_records),
        ("directory_enabled", 0), ("my_worker_id", 0), ("directory_entries", 0),
        *sdpa_rows(ctx.server.parts.attention),
    ]


def sdpa_rows(attention) -> list[tuple[str, object]]:
    """The Stage-2 tier's counts (the reference's ``sdpa_*`` fields), 0 before its first use."""
    tier = None if attention is None else attention.tier
    return [("sdpa_warm", 0 if tier is None else len(tier)), ("sdpa_cold", 0 if tier is None else len(tier.cold)),
            ("sdpa_demotions", 0 if tier is None else tier.demotions),
            ("sdpa_rehydrates", 0 if tier is None else tier.rehydrates)]


# -- durability ---------------------------------------------------------------------------------


@command("KV.PREFIX.COMMIT", 1, "fast", categories="@pion", group="pion", since="0.1.0")
def kv_prefix_commit(ctx, argv):
    """KV.PREFIX.COMMIT: +OK once every write acknowledged so far is on disk (a barrier)."""
    if not ctx.server.settings.appendonly:
        raise ReplyError("ERR KV.PREFIX.COMMIT: --no-wal, writes are not logged")
    journal = ctx.server.journal
    if journal.write_error() is not None:
        raise ReplyError("ERR KV.PREFIX.COMMIT: a log could not be flushed (or --no-wal)")
    barrier = getattr(journal, "sync_barrier", None)
    if barrier is not None:
        barrier()
    ctx.hold_until_durable(journal.seq)
    return OK


@command("KV.PREFIX.SAVE", -1, "admin noscript", categories="@admin @pion", group="pion", since="0.1.0")
def kv_prefix_save(ctx, argv):
    """KV.PREFIX.SAVE [relative_path]: snapshot now (SAVE: the whole dataset, K/V state included).

    The snapshot replaces the log it covers, as the reference's V-store snapshot truncates its
    WAL. A custom path is checked as the reference checks it, then refused: the snapshot lives
    in the data directory.
    """
    if len(argv) > 2:
        raise ReplyError("ERR syntax error")
    if len(argv) == 2:
        check_relative_path(arg(argv[1]))
        raise ReplyError("ERR KV.PREFIX.SAVE: a custom path is not supported (the snapshot is written to the data directory)")
    persistence = ctx.server.parts.persistence
    if persistence is None:
        raise ReplyError("ERR KV.PREFIX.SAVE failed (no data directory)")
    try:
        persistence.save()
    except ReplyError as exc:
        if exc.message != "ERR":
            raise
        raise ReplyError("ERR KV.PREFIX.SAVE failed (no active sessions or io error)") from None
    return OK


def check_relative_path(path: bytes) -> None:
    parts = path.split(b"/")
    if not path or path[:1] in (b"/", b"~") or b".." in parts or any(b < 32 or b == 127 for b in path):
        raise ReplyError(
            "ERR KV.PREFIX.SAVE: path must be relative to the data directory (no leading '/', no '..', no control bytes)"
        )
