"""CLIENT TRACKING, CLIENT CACHING, CLIENT GETREDIR and CLIENT TRACKINGINFO: client-side caching
as Redis 7 answers them; the table and the invalidations are ``pion.server.tracking``'s."""

from __future__ import annotations

from pion.protocol import errors
from pion.protocol.errors import ReplyError
from pion.protocol.resp import OK, SetReply
from pion.server.args import parse_int
from pion.server.context import Ctx
from pion.server.net.client import Client
from pion.server.registry import command
from pion.server.security.tenants import visible_clients
from pion.server.tracking import overlaps

_USER = "noscript loading stale"
_CATS = "@slow @connection"


@command("CLIENT|TRACKING", -3, _USER, categories=_CATS, group="connection", since="6.0.0")
def client_tracking(ctx: Ctx, argv: list[bytes]):
    """CLIENT TRACKING <ON | OFF> [REDIRECT client-id] [PREFIX prefix [PREFIX prefix ...]] [BCAST] [OPTIN]
    [OPTOUT] [NOLOOP]"""
    options = parse_tracking_options(ctx, argv)
    mode = argv[2].lower()
    client = ctx.client
    if mode == b"off":
        ctx.server.tracking.disable(client)
        return OK
    if mode != b"on":
        raise ReplyError(errors.SYNTAX)
    redirect, bcast, optin, optout, noloop, prefixes = options
    check_tracking_modes(client, bcast, optin, optout, prefixes)
    ctx.server.tracking.enable(client, redirect, bcast, optin, optout, noloop, prefixes)
    return OK


def parse_tracking_options(ctx: Ctx, argv: list[bytes]) -> tuple:
    redirect, prefixes = 0, []
    flags = {b"bcast": False, b"optin": False, b"optout": False, b"noloop": False}
    i = 3
    while i < len(argv):
        option, more = argv[i].lower(), i + 1 < len(argv)
        if option == b"redirect" and more:
            i += 1
            if redirect:
                raise ReplyError("ERR A client can only redirect to a single other client")
            redirect = parse_int(argv[i])
            target = visible_clients(ctx).get(redirect)  # a tenant may redirect only to its own connections
            if target is None:
                raise ReplyError("ERR The client ID you want redirect to does not exist")
        elif option in flags:
            flags[option] = True
        elif option == b"prefix" and more:
            i += 1
            prefixes.append(argv[i])
        else:
            raise ReplyError(errors.SYNTAX)
        i += 1
    return redirect, flags[b"bcast"], flags[b"optin"], flags[b"optout"], flags[b"noloop"], prefixes


def check_tracking_modes(client: Client, bcast: bool, optin: bool, optout: bool, prefixes: list[bytes]) -> None:
    """CLIENT TRACKING ON's compatibility checks, with Redis's texts."""
    state = client.tracking
    if not bcast and prefixes:
        raise ReplyError("ERR PREFIX option requires BCAST mode to be enabled")
    if state is not None and state.bcast != bcast:
        raise ReplyError("ERR You can't switch BCAST mode on/off before disabling tracking for this client, "
                         "and then re-enabling it with a different mode.")
    if bcast and (optin or optout):
        raise ReplyError("ERR OPTIN and OPTOUT are not compatible with BCAST")
    if optin and optout:
        raise ReplyError("ERR You can't specify both OPTIN mode and OPTOUT mode")
    if state is not None and ((optin and state.optout) or (optout and state.optin)):
        raise ReplyError("ERR You can't switch OPTIN/OPTOUT mode before disabling tracking for this client, "
                         "and then re-enabling it with a different mode.")
    existing = state.prefixes if state is not None else []
    for i, prefix in enumerate(prefixes):
        for old in existing:
            if overlaps(old, prefix):
                raise ReplyError(f"ERR Prefix '{_text(prefix)}' overlaps with an existing prefix '{_text(old)}'. "
                                 "Prefixes for a single client must not overlap.")
        for other in prefixes[i + 1:]:
            if overlaps(prefix, other):
                raise ReplyError(f"ERR Prefix '{_text(prefix)}' overlaps with another provided prefix "
                                 f"'{_text(other)}'. Prefixes for a single client must not overlap.")


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", "replace")


@command("CLIENT|GETREDIR", 2, _USER, categories=_CATS, group="connection", since="6.0.0")
def client_getredir(ctx: Ctx, argv: list[bytes]):
    """CLIENT GETREDIR"""
    state = ctx.client.tracking
    return -1 if state is None else state.redirect


@command("CLIENT|TRACKINGINFO", 2, _USER, categories=_CATS, group="connection", since="6.2.0")
def client_trackinginfo(ctx: Ctx, argv: list[bytes]):
    """CLIENT TRACKINGINFO"""
    state = ctx.client.tracking
    if state is None:
        return {b"flags": SetReply([b"off"]), b"redirect": -1, b"prefixes": []}
    return {b"flags": SetReply([b"on", *state.flags()]), b"redirect": state.redirect,
            b"prefixes": sorted(state.prefixes)}


@command("CLIENT|CACHING", 3, _USER, categories=_CATS, group="connection", since="6.0.0")
def client_caching(ctx: Ctx, argv: list[bytes]):
    """CLIENT CACHING <YES | NO>"""
    state = ctx.client.tracking
    if state is None:
        raise ReplyError("ERR CLIENT CACHING can be called only when the client is in tracking mode with OPTIN or "
                         "OPTOUT mode enabled")
    mode = argv[2].lower()
    if mode == b"yes" and not state.optin:
        raise ReplyError("ERR CLIENT CACHING YES is only valid when tracking is enabled in OPTIN mode.")
    if mode == b"no" and not state.optout:
        raise ReplyError("ERR CLIENT CACHING NO is only valid when tracking is enabled in OPTOUT mode.")
    if mode not in (b"yes", b"no"):
        raise ReplyError(errors.SYNTAX)
    state.caching = True
    return OK
