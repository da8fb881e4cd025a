"""The command table: each handler declares its name, arity, flags, keys and ACL categories.

A handler is a plain function ``handler(ctx, argv) -> reply`` decorated with ``@command``. The
decorator only attaches a ``CommandSpec``; ``build_table`` collects the specs of the family
modules listed in ``pion.server.commands`` into one ``CommandTable`` (no import-time global
registry). ``"CLIENT|ID"`` declares a subcommand of the container ``CLIENT``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

Handler = Callable[..., Any]

#: Redis's command flags we use. Unknown flag names are rejected at import time.
KNOWN_FLAGS = frozenset(
    {
        "write", "readonly", "denyoom", "module", "admin", "pubsub", "noscript", "blocking",
        "loading", "stale", "skip_monitor", "skip_slowlog", "asking", "fast", "no_auth",
        "may_replicate", "sentinel", "only_sentinel", "no_mandatory_keys", "protected",
        "no_async_loading", "no_multi", "movablekeys", "allow_busy", "cpu",
        # Pion: on log replay, blob arguments arrive as memoryviews of mapped arenas (no copy)
        "zero_copy",
    }
)


@dataclass(slots=True)
class CommandSpec:
    """What COMMAND INFO reports and the dispatcher checks for one command or subcommand."""

    name: str
    arity: int
    flags: frozenset[str]
    first_key: int
    last_key: int
    step: int
    categories: tuple[str, ...]
    handler: Handler | None
    group: str
    summary: str
    since: str
    subcommands: dict[bytes, CommandSpec] = field(default_factory=dict)
    container: str | None = None
    #: for commands with movable keys: argv -> key positions
    key_finder: Callable[[list[bytes]], list[int]] | None = None
    #: ``container|name`` (INFO commandstats, ACL, errors); derived once, the dispatcher reads it
    #: for every command
    full_name: str = field(init=False, default="")
    #: the dispatcher's per-command questions, answered once: a write (logged, tracked); a write
    #: whose large arguments are staged before it runs; a read counted as keyspace hits/misses
    is_write: bool = field(init=False, default=False)
    stages: bool = field(init=False, default=False)
    is_read: bool = field(init=False, default=False)
    #: a budget-bound query run in slices on the loop (set by ``pion.server.slices``)
    sliced: bool = field(init=False, default=False)

    def __post_init__(self) -> None:
        self.full_name = f"{self.container}|{self.name}" if self.container else self.name
        flags = self.flags
        self.is_write = "write" in flags
        self.stages = (self.is_write or self.name == "exec") and "zero_copy" not in flags
        self.is_read = "readonly" in flags

    def key_positions(self, argv: list[bytes]) -> list[int]:
        if self.key_finder is not None:
            return self.key_finder(argv)
        if self.first_key <= 0:
            return []
        last = self.last_key if self.last_key >= 0 else len(argv) + self.last_key
        return list(range(self.first_key, min(last, len(argv) - 1) + 1, self.step or 1))


def command(
    name: str,
    arity: int,
    flags: str = "",
    keys: tuple[int, int, int] = (0, 0, 0),
    categories: str = "",
    group: str = "generic",
    summary: str = "",
    since: str = "1.0.0",
    key_finder: Callable[[list[bytes]], list[int]] | None = None,
) -> Callable[[Handler], Handler]:
    """Declare a handler. ``flags`` and ``categories`` are space-separated, as in Redis's docs."""
    flag_set = frozenset(flags.split())
    unknown = flag_set - KNOWN_FLAGS
    if unknown:
        raise ValueError(f"unknown command flags {sorted(unknown)} on {name}")
    if key_finder is not None:
        flag_set |= {"movablekeys"}
    container, _, sub = name.lower().rpartition("|")

    def decorate(fn: Handler) -> Handler:
        specs = list(getattr(fn, "__pion_commands__", ()))
        specs.append(
            CommandSpec(
                name=sub,
                arity=arity,
                flags=flag_set,
                first_key=keys[0],
                last_key=keys[1],
                step=keys[2],
                categories=tuple(categories.split()),
                handler=fn,
                group=group,
                summary=summary or (fn.__doc__ or "").strip().split("\n")[0],
                since=since,
                container=container or None,
                key_finder=key_finder,
            )
        )
        fn.__pion_commands__ = specs  # type: ignore[attr-defined]
        return fn

    return decorate


class CommandTable:
    """Lower-case command name (bytes) -> spec."""

    def __init__(self, specs: Iterable[CommandSpec]) -> None:
        self.by_name: dict[bytes, CommandSpec] = {}
        subs: list[CommandSpec] = []
        for spec in specs:
            if spec.container:
                subs.append(spec)
            else:
                self._add(spec)
        for spec in subs:
            parent = self.by_name.get(spec.container.encode())  # type: ignore[union-attr]
            if parent is None:
                parent = self._add(_make_container(spec.container, spec.group))  # type: ignore[arg-type]
            parent.subcommands[spec.name.encode()] = spec

    def _add(self, spec: CommandSpec) -> CommandSpec:
        key = spec.name.encode()
        if key in self.by_name and self.by_name[key].handler is not None:
            raise ValueError(f"command {spec.name} declared twice")
        if key in self.by_name:  # a container created for subcommands declared first
            spec.subcommands.update(self.by_name[key].subcommands)
        self.by_name[key] = spec
        return spec

    def get(self, name: bytes) -> CommandSpec | None:
        return self.by_name.get(name) or self.by_name.get(name.lower())

    def __iter__(self):
        return iter(self.by_name.values())

    def __len__(self) -> int:
        return len(self.by_name)


def _make_container(name: str, group: str) -> CommandSpec:
    return CommandSpec(
        name=name, arity=-2, flags=frozenset(), first_key=0, last_key=0, step=0,
        categories=(), handler=None, group=group, summary=f"A container for {name.upper()} commands.",
        since="1.0.0",
    )


def collect_specs(modules: Iterable[ModuleType]) -> list[CommandSpec]:
    specs: list[CommandSpec] = []
    for module in modules:
        for value in vars(module).values():
            specs.extend(getattr(value, "__pion_commands__", ()))
    return specs
