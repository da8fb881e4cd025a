"""Run an MCP server (stdio or streamable HTTP) whose memory lives in a Pion server.

``pion mcp --url pion://[user:password@]host:1974`` (or ``PION_URL``; ``PION_USER`` and
``PION_PASSWORD`` fill in credentials the URL leaves out, so a client's JSON config need not show
them; ``pions://`` for TLS with redis-py's ``ssl_ca_certs``/``ssl_certfile``/``ssl_keyfile`` query
parameters). A tenant's user and password give that tenant's own memories. docs/mcp.md has the
JSON snippet for MCP clients.

Streamable HTTP on a non-loopback ``--host`` refuses to start without ``--auth-token-file`` (a
bearer token checked on every request) or an explicit ``--insecure``; the rules and the
Host/Origin allow-list are ``pion.client.mcp.http``'s.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

from pion.client.client import DEFAULT_URL


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--url", default=os.environ.get("PION_URL", DEFAULT_URL),
                        help="the Pion server (default: $PION_URL or %(default)s)")
    parser.add_argument("--transport", choices=("stdio", "streamable-http", "http"), default="stdio",
                        help="stdio (default: the MCP client starts this process) or streamable-http")
    parser.add_argument("--host", default="127.0.0.1", help="streamable-http: address to listen on (loopback)")
    parser.add_argument("--port", type=int, default=8000, help="streamable-http: port (default 8000)")
    parser.add_argument("--path", default="/mcp", help="streamable-http: endpoint path (default /mcp)")
    parser.add_argument("--auth-token-file", metavar="PATH",
                        help="streamable-http: a bearer token every request must send (Authorization: Bearer ...); "
                             "needed to listen on a non-loopback --host")
    parser.add_argument("--insecure", action="store_true",
                        help="streamable-http: allow a non-loopback --host without a token (trusted networks only)")
    parser.add_argument("--allowed-host", action="append", default=[], metavar="NAME[:PORT]",
                        help="streamable-http: a Host header to accept besides loopback and --host (repeatable)")


def redacted(url: str) -> str:
    """The URL with its password replaced by ``***`` (error messages end up in MCP clients' logs)."""
    import re

    return re.sub(r"^([a-z]+://[^:/@]*):[^@/]*@", r"\1:***@", url)


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)  # stdout is the protocol on stdio
    from pion.client.errors import PionError

    try:
        from pion.client.mcp.sdk import run as serve
        from pion.client.mcp.server import build
    except ImportError as exc:
        print(f"pion mcp: {exc}", file=sys.stderr)
        return 2
    transport = "streamable-http" if args.transport == "http" else args.transport
    token = None
    if transport == "stdio" and (args.auth_token_file or args.insecure or args.allowed_host):
        print("pion mcp: --auth-token-file, --insecure and --allowed-host apply to --transport streamable-http "
              "only (stdio has no listener)", file=sys.stderr)
        return 2
    if transport == "streamable-http":
        from pion.client.mcp import http

        if args.auth_token_file:
            try:
                token = http.read_token(args.auth_token_file)
            except (OSError, ValueError) as exc:
                print(f"pion mcp: cannot read the token: {exc}", file=sys.stderr)
                return 2
        refusal = http.startup_refusal(args.host, token, args.insecure)
        if refusal is not None:
            print(f"pion mcp: {refusal}", file=sys.stderr)
            return 2
        if args.insecure and not token and not http.is_loopback(args.host):
            logging.getLogger("pion.mcp").warning("listening on %s without authentication (--insecure)", args.host)
    try:
        server = build(args.url, username=os.environ.get("PION_USER") or None,
                       password=os.environ.get("PION_PASSWORD") or None, host=args.host, port=args.port,
                       path=args.path)
    except ImportError as exc:
        print(f"pion mcp: {exc}", file=sys.stderr)
        return 2
    except (PionError, OSError, ValueError) as exc:
        print(f"pion mcp: cannot use the Pion server at {redacted(args.url)}: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # redis-py's connection and auth errors
        print(f"pion mcp: cannot use the Pion server at {redacted(args.url)}: "
              f"{exc.__class__.__name__}: {exc}", file=sys.stderr)
        return 1
    serve(server, transport, token=token, allowed_hosts=tuple(args.allowed_host))
    return 0
