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
Any redis.conf parameter may be given as --name value; flags override the config file."""

#: flags that are switches (no value): flag -> (parameter, value)
SWITCHES = {"--enable-debug-command": ("enable-debug-command", "yes"), "--kvcache": ("kvcache", "yes")}


def parse_argv(argv: list[str]) -> list[tuple[str, str]]:
    """Split ``[file] --a 1 --b x y`` into (name, value) pairs, file lines first."""
    pairs: list[tuple[str, str]] = []
    args = list(argv)
    if args and not args[0].startswith("--"):
        pairs.extend(read_config_file(args.pop(0)))
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
    return settings_from_pairs(parse_argv(argv))


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
