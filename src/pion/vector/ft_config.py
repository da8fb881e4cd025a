"""RediSearch 2.10's FT.CONFIG options: their names in its order, defaults, help texts, which may be
changed at run time, and how a value is read (the same checks and error texts).

Pion applies TIMEOUT, ON_TIMEOUT, DEFAULT_DIALECT, MINPREFIX, MAXEXPANSIONS (=
MAXPREFIXEXPANSIONS), MIN_PHONETIC_TERM_LEN (``phonetic``), MINSTEMLEN (``text.stem_min_len``),
MAXSEARCHRESULTS (``search.cap_results``), MAXAGGREGATERESULTS (``aggregate.cap_results``) and
CURSOR_MAX_IDLE (``cursors.max_idle``). The others are kept, shown by GET and saved, and change
nothing in Pion: garbage collection, memory pools, the document table, thread pools and
numeric-tree tuning belong to RediSearch's C engine and have no counterpart here.
The values are strings, as FT.CONFIG GET shows them,
and are saved with the search state (the snapshot extension).
"""

from __future__ import annotations

from dataclasses import dataclass

_NO_ARG = "Expected an argument, but none provided"
_BAD_TYPE = "Could not convert argument to expected type"
_BOUNDS = "Value is outside acceptable bounds"


@dataclass(frozen=True)
class Option:
    name: str
    help: str
    kind: str  # str | flag | bool | int | results | on_timeout | gc_policy | dialect | minstemlen | fixed
    default: str | None
    minimum: int = 0
    immutable: bool = False
    shares: str = ""  # another option whose value this one is (MAXPREFIXEXPANSIONS: MAXEXPANSIONS)


OPTIONS: tuple[Option, ...] = (
    Option("EXTLOAD", "Load extension scoring/expansion module", "str", None, immutable=True),
    Option("NOGC", "Disable garbage collection (for this process)", "flag", "false", immutable=True),
    Option("MINPREFIX", "Set the minimum prefix for expansions (`*`)", "int", "2", 1),
    Option("MINSTEMLEN", "Set the minimum word length to stem (default 4)", "minstemlen", "4", 1),
    Option("FORKGC_SLEEP_BEFORE_EXIT", "set the amount of seconds for the fork GC to sleep before exists, should "
           "always be set to 0 (other then on tests).", "int", "0", 0),
    Option("MAXDOCTABLESIZE", "Maximum runtime document table size (for this process)", "int", "1000000", 1,
           immutable=True),
    Option("MAXSEARCHRESULTS", "Maximum number of results from ft.search command", "results", "1000000"),
    Option("MAXAGGREGATERESULTS", "Maximum number of results from ft.aggregate command", "results", "unlimited"),
    Option("MAXEXPANSIONS", "Maximum prefix expansions to be used in a query", "int", "200", 1),
    Option("MAXPREFIXEXPANSIONS", "Maximum prefix expansions to be used in a query", "int", "200", 1,
           shares="MAXEXPANSIONS"),
    Option("TIMEOUT", "Query (search) timeout", "int", "500", 0),
    Option("FRISOINI", "Path to Chinese dictionary configuration file (for Chinese tokenization)", "str", None,
           immutable=True),
    Option("ON_TIMEOUT", "Action to perform when search timeout is exceeded (choose RETURN or FAIL)",
           "on_timeout", "return"),
    Option("GCSCANSIZE", "Scan this many documents at a time during every GC iteration", "int", "100", 1),
    Option("MIN_PHONETIC_TERM_LEN", "Minumum length of term to be considered for phonetic matching", "int", "3", 1),
    Option("GC_POLICY", "gc policy to use (DEFAULT/LEGACY)", "gc_policy", "fork", immutable=True),
    Option("FORK_GC_RUN_INTERVAL", "interval (in seconds) in which to run the fork gc (relevant only when fork "
           "gc is used)", "int", "30", 1),
    Option("FORK_GC_CLEAN_THRESHOLD", "the fork gc will only start to clean when the number of not cleaned document "
           "will exceed this threshold", "int", "100", 0),
    Option("FORK_GC_RETRY_INTERVAL", "interval (in seconds) in which to retry running the forkgc after failure.",
           "int", "5", 1),
    Option("FORK_GC_CLEAN_NUMERIC_EMPTY_NODES", "clean empty nodes from numeric tree", "flag", "true",
           shares="_FORK_GC_CLEAN_NUMERIC_EMPTY_NODES"),
    Option("_FORK_GC_CLEAN_NUMERIC_EMPTY_NODES", "clean empty nodes from numeric tree", "bool", "true"),
    Option("UNION_ITERATOR_HEAP", "minimum number of iterators in a union from which the interator will"
           "switch to heap based implementation.", "int", "20", 1),
    Option("CURSOR_MAX_IDLE", "max idle time allowed to be set for cursor, setting it hight might cause "
           "high memory consumption.", "int", "300000", 1),
    Option("NO_MEM_POOLS", "Set RediSearch to run without memory pools", "flag", "false", immutable=True),
    Option("PARTIAL_INDEXED_DOCS", "Enable commands filter which optimize indexing on partial hash updates",
           "int", "false", 0, immutable=True),
    Option("UPGRADE_INDEX", "Relevant only when loading an v1.x rdb, specify argument for upgrading the index.",
           "fixed", "Upgrade config for upgrading", immutable=True),
    Option("_NUMERIC_COMPRESS", "Enable legacy compression of double to float.", "bool", "false"),
    Option("_FREE_RESOURCE_ON_THREAD", "Determine whether some index resources are free on a second thread.",
           "bool", "true"),
    Option("_PRINT_PROFILE_CLOCK", "Disable print of time for ft.profile. For testing only.", "bool", "true"),
    Option("RAW_DOCID_ENCODING", "Disable compression for DocID inverted index. Boost CPU performance.", "bool",
           "false", immutable=True),
    Option("_NUMERIC_RANGES_PARENTS", "Keep numeric ranges in numeric tree parent nodes of leafs "
           "for `x` generations.", "numeric_parents", "0", 0),
    Option("DEFAULT_DIALECT", "Set RediSearch default dialect version throught the lifetime of the server.",
           "dialect", "1", 1),
    Option("VSS_MAX_RESIZE", "Set RediSearch vector indexes max resize (in bytes).", "int", "0", 0),
    Option("MULTI_TEXT_SLOP", "Set RediSearch delta used to increase positional offsets between array slots for "
           "multi text values.Can control the level of separation between phrases in different array slots "
           "(related to the SLOP parameter of ft.search command)", "int", "100", 0, immutable=True),
    Option("BG_INDEX_SLEEP_GAP", "The number of iterations to run while performing background indexing"
           " before we call usleep(1) (sleep for 1 micro-second) and make sure that we"
           " allow redis process other commands.", "int", "100", 1, immutable=True),
    Option("_PRIORITIZE_INTERSECT_UNION_CHILDREN", "Intersection iterator orders the children iterators by their "
           "relative estimated number of results in ascending order, so that if we see first iterators with a "
           "lower count of results we will skip a larger number of results, which translates into faster "
           "iteration. If this flag is set, we use this optimization in a way where union iterators are being "
           "factorize by the number of their own children, so that we sort by the number of children times the "
           "overall estimated number of results instead.", "bool", "false"),
)
BY_NAME = {opt.name: opt for opt in OPTIONS}
#: the values a fresh engine starts with (an option without a value, EXTLOAD, shows as nil)
DEFAULTS: dict[str, str] = {opt.name: opt.default for opt in OPTIONS if opt.default is not None}
#: RediSearch 2.10's MAX_DIALECT_VERSION and NR_MAX_DEPTH_BALANCE
MAX_DIALECT = 4
_NUMERIC_MAX_DEPTH = 2


class ConfigError(ValueError):
    """A refused FT.CONFIG SET; ``str(exc)`` is RediSearch's reply text."""


def find(name: str) -> Option | None:
    return BY_NAME.get(name.upper())


def _integer(args: list[str], minimum: int) -> int:
    if not args:
        raise ConfigError(_NO_ARG)
    try:
        value = int(args[0], 10)
    except ValueError:
        raise ConfigError(_BAD_TYPE) from None
    if value < minimum or value >= 2**63:
        raise ConfigError(_BOUNDS)
    return value


def set_option(config: dict[str, str], name: str, args: list[str]) -> int:
    """Apply ``FT.CONFIG SET name args...``; the number of arguments it read (the rest is RediSearch's
    ``EXCESSARGS``). Raises ConfigError, leaving ``config`` as it was."""
    opt = find(name)
    if opt is None:
        raise ConfigError("Invalid option")
    if opt.immutable:
        raise ConfigError("Not modifiable at runtime")
    kind = opt.kind
    used = 1
    if kind == "flag":
        value, used = "true", 0
    elif kind == "bool":
        if not args:
            raise ConfigError(_NO_ARG)
        if args[0].lower() not in ("true", "false"):
            raise ConfigError(_BAD_TYPE)
        value = args[0].lower()
    elif kind == "results":
        number = _integer(args, -(2**63))
        value = "unlimited" if number == -1 else str(number % 2**64)
    elif kind == "on_timeout":
        if not args:
            raise ConfigError(_NO_ARG)
        if args[0].lower() not in ("return", "fail"):
            raise ConfigError("Invalid ON_TIMEOUT value")
        value = args[0].lower()
    elif kind == "dialect":
        number = _integer(args, 1)
        if number > MAX_DIALECT:
            raise ConfigError(f"Default dialect version cannot be higher than {MAX_DIALECT}")
        value = str(number)
    elif kind == "minstemlen":  # RediSearch checks the (unset) number before the parse's result
        try:
            number = _integer(args, 1)
        except ConfigError as exc:
            if str(exc) == _NO_ARG:
                raise
            number = 0
        if number < 2:
            raise ConfigError("Minimum stem length cannot be lower than 2")
        value = str(number)
    elif kind == "numeric_parents":
        number = _integer(args, 0)
        if number > _NUMERIC_MAX_DEPTH:
            raise ConfigError("Max depth for range cannot be higher than max depth for balance")
        value = str(number)
    elif kind == "int":
        value = str(_integer(args, opt.minimum))
    else:  # str / fixed / gc_policy are all immutable in RediSearch 2.10
        raise ConfigError("Not modifiable at runtime")
    config[opt.name] = value
    if opt.shares:
        config[opt.shares] = value
    for other in OPTIONS:
        if other.shares == opt.name:
            config[other.name] = value
    return used


def names(pattern: str) -> list[str]:
    """FT.CONFIG GET/HELP: ``*`` is every option, anything else one option by its name (no globs)."""
    if pattern == "*":
        return [opt.name for opt in OPTIONS]
    opt = find(pattern)
    return [] if opt is None else [opt.name]
