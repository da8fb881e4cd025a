"""``pion-server``'s start-up directives: which names exist, how many values each takes, which
reference flags are refused and why, and the parse of ``argv`` and of a config file.

The rule is redis-server's: an unknown directive or a wrong number of values refuses the start,
naming the directive (with a "did you mean" when a known name is close); a known one does what
it says or is refused with the reason. Values are checked as ``CONFIG SET`` checks them. Single-
dash short forms of the reference (``-p``) work; others are refused by name.
"""

from __future__ import annotations

import difflib
import os
import shlex

from pion.config import PARAMETERS, REDIS_TYPED, ConfigError, read_config_file
from pion.server.admin import config_table as table

#: value-less flags: flag name -> the (parameter, value) it sets
SWITCHES = {
    "enable-debug-command": ("enable-debug-command", "yes"), "kvcache": ("kvcache", "yes"),
    "no-wal": ("appendonly", "no"), "no-crash-log": ("breadcrumbs", "no"),
}
#: flags of Pion (and the reference) that are not CONFIG parameters, with their value count
FLAGS = {"requirepass-file": 1, "wal-size": 1}
#: the reference's single-dash short forms
SHORT = {"-p": "port", "-w": "workers", "-G": "ai-gateway", "-M": "max-engine"}

_NO_ATTEND = "Pion computes ATTEND.* on the CPU with numpy (no GPU kernels, no flag needed)"
_NO_MODEL = "Pion runs no model: the client prefills and ships K/V (use the client adapters)"
_NO_EMBED = "embeddings are not built yet (Pion runs no model; embed in the client)"
_ONE_LOOP = "Pion serves every client from one event loop (no worker processes or threads to configure)"
_NO_CLUSTER = ("the reference's cluster flags are not supported: use Redis's --cluster-enabled yes with CLUSTER "
               "ADDSLOTSRANGE/MEET (no gossip, no replicas; docs/scale-out.md)")
_NO_WAL_CAP = "Pion's log has no segment cap: snapshots (save rules, BGREWRITEAOF) truncate it"
_NO_VECTOR = "vector dimensions are set per index or key (FT.CREATE ... DIM n, VADD ... VALUES n)"
#: reference flags Pion cannot honour: refused at start with the reason, never silently ignored
REFUSED = {
    "metal-attention": _NO_ATTEND, "metal-attention-fp16": _NO_ATTEND, "cuda-attention": _NO_ATTEND,
    "gpu": _NO_ATTEND,
    "xdp": "XDP networking is not supported", "xdp-interface": "XDP networking is not supported",
    "xdp-iface": "XDP networking is not supported",
    "iouring": "io_uring is not supported (Pion's event loop is uvloop)",
    "sqpoll": "io_uring is not supported (Pion's event loop is uvloop)",
    "epoll": "not needed: Pion's event loop is uvloop, which uses epoll on Linux",
    "inference": _NO_MODEL, "inference-socket": _NO_MODEL, "inference-emb-model": _NO_MODEL,
    "inference-llm-model": _NO_MODEL, "llm-enabled": _NO_MODEL, "llm-port": _NO_MODEL, "llm-model": _NO_MODEL,
    "emb-enabled": _NO_EMBED, "emb-model": _NO_EMBED, "emb-host": _NO_EMBED, "emb-port": _NO_EMBED,
    "emb-query-prefix": _NO_EMBED, "emb-doc-prefix": _NO_EMBED, "emb-dim": _NO_EMBED, "auto-embed": _NO_EMBED,
    "no-auto-embed": _NO_EMBED, "nle-embed": _NO_EMBED, "no-auto-detect": _NO_EMBED,
    "ns-prefix": "namespace prefixes are not enforced (each tenant gets its own K/V space instead)",
    "workers": _ONE_LOOP, "independent-workers": _ONE_LOOP, "affinity": _ONE_LOOP, "no-affinity": _ONE_LOOP,
    "huge-pages": "huge pages are not configurable (the allocator is the OS's)",
    "no-huge-pages": "huge pages are not configurable (the allocator is the OS's)",
    "ai-gateway": "the AI gateway is not built", "max-engine": "the reference's engine sizing does not apply",
    "profile": "there are no start-up profiles: every engine is always on",
    "flare": "not supported",
    "cluster": _NO_CLUSTER, "cluster-host": _NO_CLUSTER, "cluster-nodes": _NO_CLUSTER,
    "cluster-replica": _NO_CLUSTER, "cluster-primary-host": _NO_CLUSTER, "cluster-primary-port": _NO_CLUSTER,
    "gossip-ping-ms": _NO_CLUSTER,
    "polarquant": "codecs are chosen per prefix by the client (PionPromptCache(vquant=...))",
    "turboquant": "codecs are chosen per prefix by the client (PionPromptCache(vquant=...))",
    "nanoquant": "codecs are chosen per prefix by the client (PionPromptCache(vquant=...))",
    "wal-max-segments": _NO_WAL_CAP, "wal-full-policy": _NO_WAL_CAP,
    "no-blob-tier": "large values always go to the blob arenas (tune blob-threshold instead)",
    "dim": _NO_VECTOR, "max-elements": _NO_VECTOR,
    "lua-memory-limit": "not supported: Lua scripts' memory is not capped separately",
    # redis.conf directives that are not CONFIG parameters
    "include": "not supported: put every directive in one config file",
    "rename-command": "not supported", "loadmodule": "modules are not supported",
    "sentinel": "sentinel is not supported",
}
#: Settings fields set only by pion-server itself
_INTERNAL = {"config-file"}


def accepted_names() -> set[str]:
    """Every directive that may be given (whether or not Pion acts on it; docs/config.md)."""
    names = set(table.LOOKUP) | {name for name in PARAMETERS if name not in _INTERNAL}
    return names | set(SWITCHES) | set(FLAGS)


def did_you_mean(name: str) -> str:
    close = difflib.get_close_matches(name, sorted(accepted_names()), n=1, cutoff=0.75)
    return f" (did you mean --{close[0]}?)" if close else ""


def value_count_ok(name: str, count: int) -> bool:
    param = table.LOOKUP.get(name)
    if param is not None and param.flags & table.MULTI_ARG:
        return count >= 1 or name == "save"
    if name == "user":  # user <name> <rule> ...
        return count >= 1
    return count == 1


def check_directive(name: str, values: list[str], where: str | None = None) -> tuple[str, str]:
    """One directive as ``(name, value)``; raises ConfigError with redis-server's reasons.

    ``where``: ``"path:line"`` for a config file line, None for a flag.
    """
    low = name.lower()
    label = f"--{low}" if where is None else f"{where}: '{low}'"
    if low in REFUSED:
        raise ConfigError(f"{label} is not supported: {REFUSED[low]}")
    if low in SWITCHES and not values:
        return SWITCHES[low]
    if low in SWITCHES and low not in PARAMETERS and low not in table.LOOKUP and low != "kvcache":
        raise ConfigError(f"{label} takes no value (got {' '.join(values)!r})")
    if low not in accepted_names():
        raise ConfigError(f"unknown {'option' if where is None else 'directive'} {label}{did_you_mean(low)}")
    expected = FLAGS.get(low)
    if (expected is not None and len(values) != expected) or (expected is None and not value_count_ok(low, len(values))):
        shown = " ".join(shlex.quote(v) for v in values) or "nothing"
        raise ConfigError(f"{label}: wrong number of arguments ({len(values)} given: {shown})")
    value = " ".join(values)
    if low == "wal-size":  # the reference's segment size in MB
        if not value.isdigit() or int(value) < 1:
            raise ConfigError(f"{label} must be a number of megabytes >= 1, got {value!r}")
        return "wal-segment-size", f"{int(value)}mb"
    param = table.LOOKUP.get(low)
    typed = param is not None and param.name in REDIS_TYPED
    if param is not None and (typed or (low not in PARAMETERS and param.name not in PARAMETERS)):
        try:
            value = table.normalize(param, value, param.default)  # checked as CONFIG SET checks it
        except ConfigError as exc:
            raise ConfigError(f"{label}: {exc}") from None
    return (param.name if typed and param is not None else low), value


def parse_args(args: list[str]) -> list[tuple[str, str]]:
    """``--a 1 --b x y -p 7`` as checked ``(name, value)`` pairs."""
    pairs: list[tuple[str, str]] = []
    name: str | None = None
    values: list[str] = []
    for arg in [*args, "--"]:
        is_short = arg in SHORT or (arg[:1] == "-" and arg[1:2].isalpha() and len(arg) == 2)
        if arg.startswith("--") or is_short:
            if name is not None:
                pairs.append(check_directive(name, values))
            if is_short and arg not in SHORT:
                raise ConfigError(f"unknown option {arg} (the single-dash forms are {', '.join(SHORT)})")
            name, values = (SHORT[arg] if is_short else arg[2:] or None), []
        elif name is None:
            raise ConfigError(f"unexpected argument '{arg}' (directives are --name value)")
        else:
            values.append(arg)
    return pairs


def read_file(path: str) -> list[tuple[str, str]]:
    """A redis.conf-style file, every directive checked, then the file itself (CONFIG REWRITE's)."""
    return [*read_config_file(path, check_directive), ("config-file", os.path.abspath(path))]
