"""``pion-server [config-file] [--name value ...]``: flags override the file, as redis-server."""

from __future__ import annotations

import logging
import os
import sys

from pion.config import ConfigError, Settings, read_config_file, settings_from_pairs

_LEVELS = {"debug": logging.DEBUG, "verbose": logging.INFO, "notice": logging.INFO,
           "warning": logging.WARNING, "nothing": logging.CRITICAL + 1}

USAGE = """usage: pion-server [config-file] [--port N] [--bind ADDR ...] [--dir DIR]
                   [--unixsocket PATH] [--maxclients N] [--timeout SECS]
                   [--loglevel debug|verbose|notice|warning] [--logfile PATH]
                   [--appendfsync always|everysec|no] [--maxmemory BYTES] [--<any-config> VALUE ...]

Pion: a memory engine for LLM inference on the Redis wire protocol (default port 1974).
Any redis.conf parameter may be given as --name value; flags override the config file.

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
--semantic-cache-threshold SIM (default 0.85, cosine similarity).
Reference flags for hardware Pion does not drive (--metal-attention, --cuda-attention, --gpu,
--xdp, --iouring, --inference, ...) are refused with the reason.

Security (SECURITY.md): --requirepass-file PATH (or PION_REQUIREPASS, or --requirepass PASS: visible
in ps) makes every client AUTH first. --tenant NAME:PASSWORD[:quota=1gb] (repeatable) or
--tenants-file PATH adds users with keyspaces of their own. Binding a non-loopback address without
a password is refused unless --protected-mode no. TLS: --tls-port N --tls-cert-file F --tls-key-file F
[--tls-ca-cert-file F] [--tls-auth-clients yes|no|optional]."""

#: flags that are switches (no value): flag -> (parameter, value)
SWITCHES = {"--enable-debug-command": ("enable-debug-command", "yes"), "--kvcache": ("kvcache", "yes")}


_NO_GPU = "Pion computes ATTEND.* on the CPU with numpy (no GPU kernels, no flag needed)"
_NO_MODEL = "Pion runs no model: the client prefills and ships K/V (use the client adapters)"
#: reference flags we cannot honour: refused at start with the reason, never silently ignored
UNSUPPORTED = {
    "--metal-attention": _NO_GPU, "--metal-attention-fp16": _NO_GPU, "--cuda-attention": _NO_GPU,
    "--gpu": _NO_GPU, "--fa-window": _NO_GPU,
    "--xdp": "XDP networking is not supported", "--xdp-interface": "XDP networking is not supported",
    "--xdp-iface": "XDP networking is not supported",
    "--iouring": "io_uring is not supported (Pion's event loop is uvloop)",
    "--sqpoll": "io_uring is not supported (Pion's event loop is uvloop)",
    "--inference": _NO_MODEL, "--inference-socket": _NO_MODEL, "--inference-emb-model": _NO_MODEL,
    "--inference-llm-model": _NO_MODEL, "--llm-enabled": _NO_MODEL, "--llm-port": _NO_MODEL,
    "--llm-model": _NO_MODEL,
    "--ns-prefix": "namespace prefixes are not enforced (each tenant gets its own K/V space instead)",
}


def parse_argv(argv: list[str]) -> list[tuple[str, str]]:
    """Split ``[file] --a 1 --b x y`` into (name, value) pairs, file lines first."""
    pairs: list[tuple[str, str]] = []
    args = list(argv)
    for arg in args:
        if arg in UNSUPPORTED:
            raise ConfigError(f"{arg} is not supported: {UNSUPPORTED[arg]}")
    if args and not args[0].startswith("--"):
        path = args.pop(0)
        pairs.extend(read_config_file(path))
        pairs.append(("config-file", os.path.abspath(path)))  # CONFIG REWRITE rewrites this file
    name: str | None = None
    values: list[str] = []
    for arg in args + ["--"]:
        if arg.startswith("--"):
            if name is not None:
                if not values and f"--{name}" not in SWITCHES:
                    raise ConfigError(f"--{name} needs a value")
                pairs.append(SWITCHES[f"--{name}"] if not values and f"--{name}" in SWITCHES else (name, " ".join(values)))
            name, values = (arg[2:] or None), []
        elif name is None:
            raise ConfigError(f"unexpected argument '{arg}'")
        else:
            values.append(arg)
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
    if argv and argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0
    if argv and argv[0] in ("-v", "--version"):
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
