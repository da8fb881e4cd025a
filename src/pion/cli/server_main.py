"""``pion-server [config-file] [--name value ...]``: flags override the file, as redis-server."""

from __future__ import annotations

import logging
import os
import sys

from pion.cli.flags import parse_args, read_file
from pion.config import ConfigError, Settings, settings_from_pairs

_LEVELS = {"debug": logging.DEBUG, "verbose": logging.INFO, "notice": logging.INFO,
           "warning": logging.WARNING, "nothing": logging.CRITICAL + 1}

USAGE = """usage: pion-server [config-file] [--port N] [--bind ADDR ...] [--dir DIR]
                   [--unixsocket PATH] [--maxclients N] [--timeout SECS]
                   [--loglevel debug|verbose|notice|warning] [--logfile PATH]
                   [--appendfsync always|everysec|no] [--maxmemory BYTES] [--<any-config> VALUE ...]

Pion: a memory engine for LLM inference on the Redis wire protocol (default port 1974).
Any redis.conf parameter may be given as --name value; flags override the config file.

An unknown directive, or a wrong number of values, refuses the start (with a "did you mean").
-p N is --port N. --no-wal is --appendonly no.

K/V cache: --kv-maxmemory BYTES caps the stored prefixes (0 = no cap; whole prefixes are evicted,
least recently used first, leaves of a chain before their roots, pinned ones never).
--kv-export-maxbytes BYTES caps V.EXPORT's files, kept in /dev/shm (default 4gb; 0 disables it).
--kvcache is accepted for the reference's scripts and does nothing: the K/V cache is always on.
MoE experts: --moe-cache DIR (the models MOE.EXPERT.LOAD may load) --moe-cache-mib N (resident budget,
default 1024; docs/moe.md).
Embeddings (AI.EMBED, AI.SEMANTIC_CACHE, AI.MEMORY, FT EMBED fields; docs/embeddings.md):
--embed-provider minilm (default: the packaged all-MiniLM-L6-v2, needs the [embed] extra) |
sentence-transformers:PATH | openai (--embed-url URL --embed-model NAME, key in PION_EMBED_API_KEY or
--embed-api-key-file PATH) | none; --embed-batch-size N --embed-threads N --embed-preload yes;
--semantic-cache-threshold SIM (default 0.85, cosine similarity) --semantic-cache-verify off|lexical|model
(default lexical: the check after the vector match).
Stage 2 (ATTEND.PREFIX.*, on the CPU): --attention-warm-bytes BYTES caps the prefixes kept ready
(default 1gb; the rest answer -COLDMISS until KV.PREFIX.WARM); --fa-window N attends only the
last N prefix tokens when a query does not say (default 0 = all).
Reference flags for what Pion does not have (--metal-attention, --cuda-attention, --gpu, --xdp,
--iouring, --inference, --workers, ...) are refused with the reason.

Breadcrumbs (docs/durability.md): --crash-log PATH (default <dir>/pion.crash.log), --status-file PATH
(default <dir>/pion.status), --no-crash-log (neither), --rss-warn-pct N (default 70; over 100: off).
Metrics (docs/metrics.md): --metrics-port N serves Prometheus text at http://127.0.0.1:N/metrics
(default 0 = off); --metrics-bind ADDR listens elsewhere: off loopback it needs a password on the
server (scrapes then send HTTP Basic credentials) or --protected-mode no.
Dashboard (docs/dashboard.md): --dashboard-port N serves a page at http://127.0.0.1:N/ (default 0 = off)
of the stored prefixes, hit rate, memory, indexes, replication and the slow log; the server's own users
log in. --dashboard-bind ADDR listens elsewhere, refused at start unless a password is set.

Security (SECURITY.md): --requirepass-file PATH (or PION_REQUIREPASS, or --requirepass PASS: visible
in ps) makes every client AUTH first. --tenant NAME:PASSWORD[:quota=1gb] (repeatable) or
--tenants-file PATH adds users with keyspaces of their own. Binding a non-loopback address without
a password is refused unless --protected-mode no. TLS: --tls-port N --tls-cert-file F --tls-key-file F
[--tls-ca-cert-file F] [--tls-auth-clients yes|no|optional]."""

def parse_argv(argv: list[str]) -> list[tuple[str, str]]:
    """``[file] --a 1 --b x y`` as checked (name, value) pairs, the file's lines first
    (``pion.cli.flags``: unknown names and wrong value counts refuse the start)."""
    args = list(argv)
    pairs: list[tuple[str, str]] = []
    if args and not args[0].startswith("-"):
        pairs.extend(read_file(args.pop(0)))
    pairs.extend(parse_args(args))
    return pairs


def setup_logging(settings: Settings) -> None:
    handlers: list[logging.Handler] = []
    if settings.logfile:
        handlers.append(logging.FileHandler(settings.logfile))
    else:
        handlers.append(logging.StreamHandler(sys.stderr))
    logging.basicConfig(
        level=_LEVELS.get(settings.loglevel, logging.INFO),
        format=f"{os.getpid()}:M %(asctime)s.%(msecs)03d %(levelname)s %(name)s: %(message)s",
        datefmt="%d %b %Y %H:%M:%S",
        handlers=handlers,
        force=True,
    )


def build_settings(argv: list[str]) -> Settings:
    return settings_from_pairs(with_secrets(parse_argv(argv)))


def with_secrets(pairs: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """``PION_REQUIREPASS`` (overridden by flags) and ``requirepass-file PATH`` (trailing newline
    stripped, an empty file refused) become ``requirepass``: a password not shown by ``ps``."""
    out = [("requirepass", os.environ["PION_REQUIREPASS"])] if os.environ.get("PION_REQUIREPASS") else []
    if os.environ.get("PION_EMBED_API_KEY"):  # the embeddings endpoint's key, likewise kept out of ps
        out.append(("embed-api-key", os.environ["PION_EMBED_API_KEY"]))
    for name, value in pairs:
        if name.lower() == "embed-api-key-file":
            with open(value, encoding="utf-8") as handle:
                out.append(("embed-api-key", handle.read().strip()))
        elif name.lower() == "requirepass-file":
            with open(value, encoding="utf-8") as handle:
                secret = handle.read()
            secret = secret[:-1] if secret.endswith("\n") else secret
            secret = secret[:-1] if secret.endswith("\r") else secret
            if not secret:
                raise ConfigError(f"--requirepass-file {value} is empty")
            out.append(("requirepass", secret))
        else:
            out.append((name, value))
    return out


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if any(arg in ("-h", "--help") for arg in argv):
        print(USAGE)
        return 0
    if any(arg in ("-v", "--version") for arg in argv):
        from pion import __version__

        print(f"pion-server {__version__}")
        return 0
    try:
        settings = build_settings(argv)
    except (ConfigError, OSError) as exc:
        print(f"pion-server: {exc}", file=sys.stderr)
        return 2
    setup_logging(settings)
    from pion.server.run import run_server

    return run_server(settings)


if __name__ == "__main__":
    sys.exit(main())
