"""DEBUG SYSFAULT: syscall-level fault injection on a running server, for the fault matrix.

Why a command: the matrix test runs the server as a child process (it must SIGKILL it), so the
fault is armed over the wire. Only with ``enable-debug-command``, like every DEBUG subcommand.
The injector (``pion.storage.faults.arm_syscall``) watches the server's data directory only:

    DEBUG SYSFAULT <open|write|pwrite|fsync|ftruncate|rename|unlink> <nth> <ERRNO> [ONCE|STICKY]
    DEBUG SYSFAULT ALSO <op> <nth> <ERRNO> [ONCE|STICKY]   a second fault, its nth counted from now
    DEBUG SYSFAULT WATCH     count the operations from now, fail none
    DEBUG SYSFAULT COUNT     calls of each operation since the last arm/WATCH, and ``injected``
    DEBUG SYSFAULT TRACE     "<op> <n> <path>" of each call counted since then (which k opens a file)
    DEBUG SYSFAULT OFF       put the real functions back (the counts stay readable)
"""

from __future__ import annotations

from typing import Any

from pion.protocol.errors import ReplyError
from pion.protocol.resp import OK
from pion.storage import faults

USAGE = "ERR DEBUG SYSFAULT [ALSO] <op> <nth> <ERRNO> [ONCE|STICKY] | WATCH | COUNT | TRACE | OFF"


def debug_sysfault(directory: str, argv: list[bytes]) -> Any:
    words = [bytes(a).decode("latin-1") for a in argv[2:]]
    verb = words[0].upper() if words else ""
    if len(words) == 1 and verb == "OFF":
        faults.disarm_syscall()
        return OK
    if len(words) == 1 and verb == "WATCH":
        faults.watch_syscalls(directory)
        return OK
    if len(words) == 1 and verb == "COUNT":
        return {name.encode(): count for name, count in faults.syscall_counts().items()}
    if len(words) == 1 and verb == "TRACE":
        return [f"{op} {n} {path}".encode() for op, n, path in faults.syscall_trace()]
    also = verb == "ALSO"
    if also:
        words = words[1:]
    if len(words) not in (3, 4):
        raise ReplyError(USAGE)
    mode = words[3].upper() if len(words) == 4 else "ONCE"
    if mode not in ("ONCE", "STICKY"):
        raise ReplyError(USAGE)
    try:
        nth = int(words[1])
    except ValueError:
        raise ReplyError("ERR DEBUG SYSFAULT: the call number must be an integer") from None
    try:
        faults.arm_syscall(words[0].lower(), nth, words[2], sticky=mode == "STICKY", root=directory,
                           also=also)
    except ValueError as exc:
        raise ReplyError(f"ERR DEBUG SYSFAULT: {exc}") from None
    return OK
